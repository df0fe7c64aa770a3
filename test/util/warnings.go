package util

import "sync"

// Warnings collects the warnings an API server sends with its responses:
// set it as a rest.Config's WarningHandler.
type Warnings struct {
	mu   sync.Mutex
	list []string
}

// HandleWarningHeader records a warning (rest.WarningHandler).
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// Take returns the warnings received since the last Take, and forgets them.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}
