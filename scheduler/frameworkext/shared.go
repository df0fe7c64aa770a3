package frameworkext

// SharedKey names state that lives as long as one scheduler and is shared
// within it: by every instance of one plugin (the framework builds an
// instance per profile that enables the plugin), or between plugins, when a
// package that both import, and that neither owns, declares the key and the
// type of its value (a contract package: one plugin Sets what the other
// Looks up, and neither imports the other). A key is its own identity: two
// keys never share a value, whatever their names, and T is the value's
// type, so no lookup needs a type assertion. Declare one key per kind of
// state, at package level.
type SharedKey[T any] struct{ name string }

// NewSharedKey returns a new key; name is for humans (errors, debugging).
func NewSharedKey[T any](name string) *SharedKey[T] { return &SharedKey[T]{name: name} }

// String is the key's name.
func (k *SharedKey[T]) String() string { return k.name }

// Get returns the value under k in e's scheduler, creating it with create
// the first time.
func (k *SharedKey[T]) Get(e *Extender, create func() T) T {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.shared[k]; ok {
		return as[T](v)
	}
	v := create()
	e.shared[k] = v
	return v
}

// Set puts v under k in e's scheduler, replacing any value there.
func (k *SharedKey[T]) Set(e *Extender, v T) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shared[k] = v
}

// Lookup returns the value under k in e's scheduler, and false while there
// is none (neither Get nor Set has put one there yet). Plugins are built in
// any order: a plugin that reads what another Sets looks it up when it
// needs it, not when it is built.
func (k *SharedKey[T]) Lookup(e *Extender) (T, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.shared[k]
	return as[T](v), ok
}

// as is a value of the shared map as the T of its key. Only a key of type
// T puts values under itself, so the assertion fails only for a nil
// interface value, which is T's zero value.
func as[T any](v any) T {
	t, _ := v.(T)
	return t
}
