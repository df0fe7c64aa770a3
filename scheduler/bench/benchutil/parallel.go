package benchutil

import (
	"fmt"
	"sync"
	"testing"
)

// RunParallel runs f(0..n-1) from workers goroutines and returns the first
// error, naming its item; every item runs even after an error.
func RunParallel(n, workers int, f func(int) error) error {
	next := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					select {
					case errs <- fmt.Errorf("item %d: %w", i, err):
					default:
					}
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// InParallel is RunParallel that fails tb on the first error.
func InParallel(tb testing.TB, n, workers int, f func(int) error) {
	tb.Helper()
	if err := RunParallel(n, workers, f); err != nil {
		tb.Fatal(err)
	}
}
