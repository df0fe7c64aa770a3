package benchutil

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

func TestRunParallel(t *testing.T) {
	var ran atomic.Int64
	if err := RunParallel(100, 4, func(int) error { ran.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 100 {
		t.Errorf("ran %d items, want 100", ran.Load())
	}
	ran.Store(0)
	err := RunParallel(10, 3, func(i int) error {
		ran.Add(1)
		if i == 7 {
			return errors.New("boom")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "item 7: boom") {
		t.Errorf("RunParallel error = %v, want item 7's", err)
	}
	if ran.Load() != 10 {
		t.Errorf("ran %d items after an error, want all 10", ran.Load())
	}
}
