package util

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Poll calls cond every Interval, at once first, until it returns true,
// timeout passes or ctx ends. cond returns false with an error to say what
// it saw instead (an API error, or a description of the state): that error
// is not fatal, it is kept as the last state, and polling goes on. On a
// timeout Poll returns an error naming what was waited for, the timeout
// and the last state.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	return poll(ctx, Interval, timeout, what, cond)
}

// PollSlowly is Poll every SlowInterval, for a check that lists many
// objects while a benchmark measures.
func PollSlowly(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	return poll(ctx, SlowInterval, timeout, what, cond)
}

func poll(ctx context.Context, interval, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	var last error
	checks := 0
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		checks++
		done, err := cond(ctx)
		if done {
			return true, nil
		}
		if err != nil {
			last = err
		}
		return false, nil
	})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = ctx.Err()
	}
	if last == nil {
		return fmt.Errorf("%s: not within %v (%d checks; %w)", what, timeout, checks, err)
	}
	return fmt.Errorf("%s: not within %v (%d checks); last seen: %w", what, timeout, checks, last)
}

// WaitFor gets an object every Interval, at once first, until done says it
// is what the caller waits for, timeout passes or ctx ends, and returns the
// last object got (the zero value if none). A get error is not fatal: it
// is the last state until a get succeeds. On a timeout the error names
// what was waited for and the last state: the last get error, or the last
// object as describe tells it.
func WaitFor[T any](ctx context.Context, timeout time.Duration, what string,
	get func(context.Context) (T, error), done func(T) bool, describe func(T) string) (T, error) {
	var last T
	err := Poll(ctx, timeout, what, func(ctx context.Context) (bool, error) {
		obj, err := get(ctx)
		if err != nil {
			return false, err
		}
		last = obj
		if done(obj) {
			return true, nil
		}
		return false, errors.New(describe(obj))
	})
	return last, err
}
