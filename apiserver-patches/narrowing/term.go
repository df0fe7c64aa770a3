package narrowing

import (
	"math"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	core "k8s.io/kubernetes/pkg/apis/core"
)

// nodeNameField is the only node field nodeSelectorTerms can match on.
const nodeNameField = "metadata.name"

// valueList is the values of one In or NotIn requirement. Short lists are
// scanned; a long one gets a set the first time it is probed.
type valueList struct {
	vals []string
	set  map[string]struct{}
}

const scanLimit = 12

func (l *valueList) has(v string) bool {
	if len(l.vals) <= scanLimit {
		return slices.Contains(l.vals, v)
	}
	if l.set == nil {
		l.set = make(map[string]struct{}, len(l.vals))
		for _, x := range l.vals {
			l.set[x] = struct{}{}
		}
	}
	_, ok := l.set[v]
	return ok
}

// keySet is the set of values of one label (or of the node name) that one
// term admits: the conjunction of that term's requirements on the key. The
// domain is "label absent" plus every string.
type keySet struct {
	key   string
	field bool // metadata.name: always present
	// absent: a node without the label is admitted.
	absent bool
	// A present value v is admitted when it is in every list of ins, in no
	// list of notIns, and, if ints, parses as a base-10 int64 n with
	// lo <= n <= hi (inclusive bounds).
	ins    []valueList
	notIns []valueList
	ints   bool
	lo, hi int64
	// size and reqs count the values and the requirements on the key: the
	// cost of a membership test is at most reqs, of a scan of the key's
	// values at most size, which is what the check's budget charges.
	size, reqs int
}

// cost bounds the work of comparing two key sets (or of checking one, with
// o nil): every value of either is probed at most a constant number of
// times against every requirement of either.
func (s *keySet) cost(o *keySet) int64 {
	size, reqs := int64(s.size), int64(s.reqs)
	if o != nil {
		size += int64(o.size)
		reqs += int64(o.reqs)
	}
	return (1 + size) * (1 + reqs)
}

func newKeySet(key string, field bool) keySet {
	return keySet{key: key, field: field, absent: !field, lo: math.MinInt64, hi: math.MaxInt64}
}

// parseInt is how the scheduler reads Gt/Lt label values.
func parseInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// member reports whether a present value v is admitted.
func (s *keySet) member(v string) bool {
	return s.memberSkipping(v, -1)
}

// memberSkipping is member without checking ins[skip], for values drawn from
// that very list.
func (s *keySet) memberSkipping(v string, skip int) bool {
	for i := range s.ins {
		if i != skip && !s.ins[i].has(v) {
			return false
		}
	}
	for i := range s.notIns {
		if s.notIns[i].has(v) {
			return false
		}
	}
	if s.ints {
		n, ok := parseInt(v)
		if !ok || n < s.lo || n > s.hi {
			return false
		}
	}
	return true
}

// finite reports whether the admitted present values are finitely many.
// Integer ranges are not: "7", "07" and "+7" all parse as 7.
func (s *keySet) finite() bool { return len(s.ins) > 0 || s.emptyRange() }

func (s *keySet) emptyRange() bool { return s.ints && s.lo > s.hi }

// presentEmpty reports whether no present value is admitted.
func (s *keySet) presentEmpty() bool {
	if len(s.ins) > 0 {
		for _, v := range s.ins[0].vals {
			if s.memberSkipping(v, 0) {
				return false
			}
		}
		return true
	}
	return s.emptyRange()
}

func (s *keySet) empty() bool { return !s.absent && s.presentEmpty() }

// universal reports whether the set admits everything of its domain.
func (s *keySet) universal() bool {
	return (s.absent || s.field) && len(s.ins) == 0 && len(s.notIns) == 0 && !s.ints
}

// compiledTerm is a nodeSelectorTerm as a conjunction of per-key sets.
type compiledTerm struct {
	keys []keySet
	// lists is the backing store of the keys' value lists, one per
	// requirement, so compiling a term allocates a constant number of times.
	lists []valueList
	// nothing: the term admits no node (no requirements at all, an
	// unsatisfiable key, or an old requirement that cannot be interpreted).
	nothing bool
	// uninterpreted describes the first requirement that could not be
	// interpreted, for messages.
	uninterpreted string
	// index finds a key of a term with many keys in constant time; short
	// terms are scanned.
	index map[keyRef]int
}

type keyRef struct {
	key   string
	field bool
}

func (t *compiledTerm) keySet(key string, field bool) *keySet {
	if k := t.find(key, field); k != nil {
		return k
	}
	t.keys = append(t.keys, newKeySet(key, field))
	switch {
	case t.index != nil:
		t.index[keyRef{key, field}] = len(t.keys) - 1
	case len(t.keys) > scanLimit:
		t.index = make(map[keyRef]int, cap(t.keys))
		for i := range t.keys {
			t.index[keyRef{t.keys[i].key, t.keys[i].field}] = i
		}
	}
	return &t.keys[len(t.keys)-1]
}

func (t *compiledTerm) find(key string, field bool) *keySet {
	if t.index != nil {
		if i, ok := t.index[keyRef{key, field}]; ok {
			return &t.keys[i]
		}
		return nil
	}
	for i := range t.keys {
		if t.keys[i].field == field && equal(t.keys[i].key, key) {
			return &t.keys[i]
		}
	}
	return nil
}

// cost bounds the work of one admits call on the term.
func (t *compiledTerm) cost() int64 { return 1 + int64(len(t.keys)) + int64(len(t.lists)) }

// list returns a one-element slice holding vals, carved from the term's
// store; appending a second list to it reallocates rather than overwriting.
func (t *compiledTerm) list(vals []string) []valueList {
	t.lists = append(t.lists, valueList{vals: vals})
	n := len(t.lists)
	return t.lists[n-1 : n : n]
}

func appendList(dst []valueList, t *compiledTerm, vals []string) []valueList {
	if dst == nil {
		return t.list(vals)
	}
	return append(dst, valueList{vals: vals})
}

// side says how to read a requirement that cannot be interpreted: in an old
// term it makes the term admit nothing (the old set is under-approximated),
// in a new term it is ignored (the new set is over-approximated). Both keep
// the containment check sound.
type side bool

const (
	oldSide side = true
	newSide side = false
)

// arena holds the compiled terms of one check. Checks run on every update
// of a gated pod; reusing the arena through a pool keeps them from producing
// garbage proportional to the affinity's size.
type arena struct {
	terms []compiledTerm
	keys  []keySet
	lists []valueList
	// budget is the work the check may still do, in the units of
	// keySet.cost; spent is set once it ran out.
	budget int64
	spent  bool
	// equal maps the canonical form of each old term to its index, built
	// the first time a new term is not contained in the old term at its
	// own index.
	equal map[string]int
}

// charge spends n units of the budget, reporting false (and from then on
// always false) once the budget is exhausted.
func (a *arena) charge(n int64) bool {
	if a.spent || n > a.budget {
		a.spent = true
		return false
	}
	a.budget -= n
	return true
}

var arenas = sync.Pool{New: func() any { return &arena{} }}

func getArena() *arena { return arenas.Get().(*arena) }

// release clears every reference into the request's objects and returns
// the arena to the pool.
func (a *arena) release() {
	clear(a.terms)
	clear(a.keys)
	clear(a.lists)
	a.terms, a.keys, a.lists = a.terms[:0], a.keys[:0], a.lists[:0]
	a.budget, a.spent, a.equal = 0, false, nil
	arenas.Put(a)
}

// grab returns n fresh elements at the end of *buf, growing it when needed.
// Earlier grabs keep their memory: a grown buffer is a new array, and the
// slices already handed out still point into the old one.
func grab[T any](buf *[]T, n int) []T {
	if cap(*buf)-len(*buf) < n {
		*buf = make([]T, 0, max(2*cap(*buf), n, 16))
	}
	start := len(*buf)
	*buf = (*buf)[:start+n]
	return (*buf)[start : start : start+n]
}

func (a *arena) compileTerm(term *core.NodeSelectorTerm, sd side) *compiledTerm {
	n := len(term.MatchExpressions) + len(term.MatchFields)
	t := &grab(&a.terms, 1)[:1][0]
	t.index = nil
	// keys must not grow once handed out as pointers: size it for the worst case.
	t.keys, t.lists = grab(&a.keys, n), grab(&a.lists, n)
	if n == 0 {
		t.nothing = true // the scheduler: an empty term selects no node
		return t
	}
	add := func(r *core.NodeSelectorRequirement, field bool) {
		a.charge(1 + int64(len(r.Values)))
		// The scheduler parses label requirements with labels.NewRequirement,
		// which fails on a value that is not a valid label value: the term
		// then matches no node. Stored pods may hold such values (validation
		// keeps accepting them on update), so an old term holding one admits
		// nothing. A new one admits nothing either, so reading it as written
		// over-approximates it, which is sound.
		if !t.apply(r, field) || (sd == oldSide && !field && !validLabelValues(r.Values)) {
			if t.uninterpreted == "" {
				t.uninterpreted = describeRequirement(r, field)
			}
			if sd == oldSide {
				t.nothing = true
			}
		}
	}
	for i := range term.MatchExpressions {
		add(&term.MatchExpressions[i], false)
	}
	for i := range term.MatchFields {
		add(&term.MatchFields[i], true)
	}
	for i := range t.keys {
		if !a.charge(t.keys[i].cost(nil)) {
			// Over budget: the caller rejects the update; stop working.
			t.nothing = sd == oldSide
			return t
		}
		if t.keys[i].empty() {
			t.nothing = true
		}
	}
	return t
}

// validLabelValues reports whether every value is a valid label value, as
// apimachinery's IsValidLabelValue decides it (at most 63 characters,
// alphanumerics at both ends, '-', '_' and '.' inside), without its regular
// expression: old terms hold many values and this runs on every update.
func validLabelValues(vals []string) bool {
	for _, v := range vals {
		n := len(v)
		if n == 0 {
			continue
		}
		if n > 63 {
			return false
		}
		// Branch-free: every allowed character has the inside bit.
		acc := labelChar[v[0]] & labelChar[v[n-1]]
		for i := 1; i < n-1; i++ {
			acc &= labelChar[v[i]] | alnum
		}
		if acc != alnum|inside {
			return false
		}
	}
	return true
}

const (
	inside = 1 << iota // allowed inside a label value
	alnum              // allowed at its ends too
)

var labelChar = func() (t [256]byte) {
	for c := range 256 {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			t[c] = alnum | inside
		case c == '-', c == '_', c == '.':
			t[c] = inside
		}
	}
	return t
}()

// apply narrows the term by one requirement, reporting false when the
// requirement cannot be interpreted (and leaving the term as it was).
func (t *compiledTerm) apply(r *core.NodeSelectorRequirement, field bool) bool {
	if field {
		// The scheduler matches fields with one-value In/NotIn selectors on
		// metadata.name only.
		if r.Key != nodeNameField || len(r.Values) != 1 ||
			(r.Operator != core.NodeSelectorOpIn && r.Operator != core.NodeSelectorOpNotIn) {
			return false
		}
	}
	switch r.Operator {
	case core.NodeSelectorOpIn:
		if len(r.Values) == 0 {
			return false
		}
		k := t.keySet(r.Key, field)
		k.absent = false
		k.ins = appendList(k.ins, t, r.Values)
	case core.NodeSelectorOpNotIn:
		if len(r.Values) == 0 {
			return false
		}
		k := t.keySet(r.Key, field)
		k.notIns = appendList(k.notIns, t, r.Values)
	case core.NodeSelectorOpExists:
		if len(r.Values) != 0 {
			return false
		}
		t.keySet(r.Key, field).absent = false
	case core.NodeSelectorOpDoesNotExist:
		if len(r.Values) != 0 {
			return false
		}
		k := t.keySet(r.Key, field)
		k.ins = appendList(k.ins, t, []string{}) // no present value
	case core.NodeSelectorOpGt, core.NodeSelectorOpLt:
		if len(r.Values) != 1 {
			return false
		}
		n, ok := parseInt(r.Values[0])
		if !ok {
			return false
		}
		k := t.keySet(r.Key, field)
		k.absent = false
		k.ints = true
		if r.Operator == core.NodeSelectorOpGt {
			if n == math.MaxInt64 {
				k.lo, k.hi = 1, 0 // nothing is greater
			} else {
				k.lo = max(k.lo, n+1)
			}
		} else {
			if n == math.MinInt64 {
				k.lo, k.hi = 1, 0
			} else {
				k.hi = min(k.hi, n-1)
			}
		}
	default:
		return false
	}
	k := t.find(r.Key, field)
	k.size += len(r.Values)
	k.reqs++
	return true
}

// gap explains why a new term is not contained in an old one: a key on
// which the new term admits a value (or absence) the old one does not.
type gap struct {
	key     string
	field   bool
	absent  bool   // the witness is a node without the label
	value   string // else the witness value
	why     string // set when there is no per-key witness
	termIdx int    // the old term
}

// errOverBudget is the gap of a comparison the budget did not pay for.
var errOverBudget = &gap{why: "was not compared: the check ran out of budget"}

// containedIn reports whether every node n admits, o admits too. It charges
// the arena's budget per key compared; once the budget is spent it reports
// false with errOverBudget, and the caller rejects the update.
func (a *arena) containedIn(n, o *compiledTerm) (bool, *gap) {
	if !a.charge(1) {
		return false, errOverBudget
	}
	if n.nothing {
		return true, nil
	}
	if o.nothing {
		if o.uninterpreted != "" {
			return false, &gap{why: "it has a requirement Gantry cannot interpret (" + o.uninterpreted + "), so it is taken to admit no node"}
		}
		return false, &gap{why: "it admits no node"}
	}
	for i := range o.keys {
		ok := &o.keys[i]
		if ok.universal() {
			continue
		}
		nk := n.find(ok.key, ok.field)
		if !a.charge(ok.cost(nk)) {
			return false, errOverBudget
		}
		if sub, g := keySubset(nk, ok); !sub {
			return false, g
		}
	}
	return true, nil
}

// keySubset reports whether n (nil: unconstrained) admits only what o does,
// and if not, a witness n admits and o does not.
func keySubset(n, o *keySet) (bool, *gap) {
	if n == nil {
		unconstrained := newKeySet(o.key, o.field)
		n = &unconstrained
	}
	g := &gap{key: o.key, field: o.field}
	if n.absent && !o.absent {
		g.absent = true
		return false, g
	}
	if n.presentEmpty() {
		return true, nil
	}
	if len(n.ins) > 0 {
		if len(n.ins) == 1 && len(n.notIns) == 0 && !n.ints &&
			len(o.ins) == 1 && len(o.notIns) == 0 && !o.ints && isSubsequence(n.ins[0].vals, o.ins[0].vals) {
			return true, nil // the common narrowing: values removed from an In list
		}
		for _, v := range n.ins[0].vals {
			if n.memberSkipping(v, 0) && !o.member(v) {
				g.value = v
				return false, g
			}
		}
		return true, nil
	}
	// n admits infinitely many values.
	if o.finite() {
		g.value = witnessOutside(n, o)
		return false, g
	}
	if o.ints {
		if !n.ints {
			g.value = witnessOutside(n, o)
			return false, g
		}
		if n.lo < o.lo || n.hi > o.hi {
			g.value = witnessOutside(n, o)
			return false, g
		}
	}
	for i := range o.notIns {
		for _, e := range o.notIns[i].vals {
			if n.member(e) {
				g.value = e
				return false, g
			}
		}
	}
	return true, nil
}

// isSubsequence reports whether sub's values appear in full, in order, in
// list: then every value of sub is in list, without building a set. It is
// the hot loop of large narrowings (values removed from long In lists).
func isSubsequence(sub, list []string) bool {
	if len(sub) > len(list) {
		return false
	}
	// Unchanged lists, and lists cut short, match position by position: walk
	// the common prefix before searching.
	i := 0
	for i < len(sub) && equal(sub[i], list[i]) {
		i++
	}
	j := i
	for _, v := range sub[i:] {
		for {
			if j == len(list) {
				return false
			}
			w := list[j]
			j++
			if equal(v, w) {
				break
			}
		}
	}
	return true
}

// equal is a == b. Label values are short; for 8 to 16 bytes it compares two
// (possibly overlapping) machine words inline instead of calling the
// runtime's memequal, which halves the cost of the long value lists of large
// affinities.
func equal(a, b string) bool {
	n := len(a)
	if n != len(b) {
		return false
	}
	if n < 8 || n > 16 {
		return a == b
	}
	pa, pb := unsafe.Pointer(unsafe.StringData(a)), unsafe.Pointer(unsafe.StringData(b))
	return *(*uint64)(pa) == *(*uint64)(pb) &&
		*(*uint64)(unsafe.Add(pa, n-8)) == *(*uint64)(unsafe.Add(pb, n-8))
}

// witnessOutside finds a value n admits and o does not, for an n that admits
// infinitely many values. It is only called when one exists; it tries the
// integers at the edges of both ranges and fresh strings, each also
// zero-padded (another spelling of the same integer).
func witnessOutside(n, o *keySet) string {
	var cands []string
	addInt := func(x int64) {
		s := strconv.FormatInt(x, 10)
		cands = append(cands, s)
		if x >= 0 {
			cands = append(cands, "0"+s, "00"+s)
		} else {
			cands = append(cands, "-0"+s[1:], "-00"+s[1:])
		}
	}
	if n.ints {
		for _, x := range []int64{n.lo, n.hi, o.lo - 1, o.hi + 1, 0} {
			if x >= n.lo && x <= n.hi {
				addInt(x)
			}
		}
		// Enough consecutive integers to step over a finite o.
		for i := int64(0); i < int64(countValues(o)+countExcluded(n)+1) && n.lo+i <= n.hi && n.lo+i >= n.lo; i++ {
			addInt(n.lo + i)
		}
	} else {
		cands = append(cands, "other")
		for i := range countValues(o) + countExcluded(n) + 1 {
			cands = append(cands, "other-"+strconv.Itoa(i))
		}
	}
	for _, c := range cands {
		if n.member(c) && !o.member(c) {
			return c
		}
	}
	return "" // unreachable for the callers' preconditions
}

func countValues(s *keySet) int {
	if len(s.ins) == 0 {
		return 0
	}
	return len(s.ins[0].vals)
}

func countExcluded(s *keySet) int {
	c := 0
	for _, l := range s.notIns {
		c += len(l.vals)
	}
	return c
}

// admits reports whether a node with the given labels and name is admitted.
func (t *compiledTerm) admits(labels map[string]string, name string) bool {
	if t.nothing {
		return false
	}
	for i := range t.keys {
		k := &t.keys[i]
		var v string
		present := true
		if k.field {
			v = name
		} else {
			v, present = labels[k.key]
		}
		if !present {
			if !k.absent {
				return false
			}
			continue
		}
		if !k.member(v) {
			return false
		}
	}
	return true
}

// sample picks a value (or absence) the key set admits.
func (s *keySet) sample() (value string, absent bool) {
	if len(s.ins) > 0 {
		for _, v := range s.ins[0].vals {
			if s.memberSkipping(v, 0) {
				return v, false
			}
		}
	} else if v := witnessOutside(s, &keySet{ins: []valueList{{}}}); v != "" {
		return v, false
	}
	return "", s.absent
}

// hasEqualOld reports whether some old term is written exactly as term,
// finding it by its canonical form in constant time per term.
func (a *arena) hasEqualOld(term *core.NodeSelectorTerm, oldTerms []core.NodeSelectorTerm) bool {
	if a.equal == nil {
		a.equal = make(map[string]int, len(oldTerms))
		for j := range oldTerms {
			a.equal[canonical(&oldTerms[j])] = j
		}
	}
	_, ok := a.equal[canonical(term)]
	return ok
}

// canonical spells a term unambiguously: every string is length-prefixed.
func canonical(t *core.NodeSelectorTerm) string {
	var b []byte
	add := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	for _, reqs := range [][]core.NodeSelectorRequirement{t.MatchExpressions, t.MatchFields} {
		b = strconv.AppendInt(b, int64(len(reqs)), 10)
		b = append(b, '|')
		for i := range reqs {
			add(reqs[i].Key)
			add(string(reqs[i].Operator))
			b = strconv.AppendInt(b, int64(len(reqs[i].Values)), 10)
			b = append(b, '|')
			for _, v := range reqs[i].Values {
				add(v)
			}
		}
	}
	return string(b)
}
