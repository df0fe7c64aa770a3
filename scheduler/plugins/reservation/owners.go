package reservation

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// ownerIndex finds the reservations a pod owns without looking at every
// reservation: object owners by pod key, controller owners by controller key,
// label selectors grouped by namespace and selector, so that a thousand
// reservations for one workload cost one selector match, annotation owners
// by key and value, and PodGroup owners by group.
type ownerIndex struct {
	byPod        map[string]map[*entry]bool
	byController map[string]map[*entry]bool
	bySelector   map[string]map[string]*selectorGroup // namespace -> selector string -> group
	// byAnnotation: annotation owners by namespace, key and value;
	// annotationKeys counts the owners per key, so that a pod's lookup
	// reads only the annotation keys some owner names.
	byAnnotation   map[string]map[*entry]bool
	annotationKeys map[string]int
	// byPodGroup: PodGroup owners by namespace and group name.
	byPodGroup map[string]map[*entry]bool
}

type selectorGroup struct {
	selector labels.Selector
	entries  map[*entry]bool
}

func newOwnerIndex() *ownerIndex {
	return &ownerIndex{
		byPod:          map[string]map[*entry]bool{},
		byController:   map[string]map[*entry]bool{},
		bySelector:     map[string]map[string]*selectorGroup{},
		byAnnotation:   map[string]map[*entry]bool{},
		annotationKeys: map[string]int{},
		byPodGroup:     map[string]map[*entry]bool{},
	}
}

func annotationKey(namespace, key, value string) string { return namespace + "/" + key + "=" + value }

func podKey(namespace, name string) string { return namespace + "/" + name }

func controllerKey(namespace, kind, name string) string { return namespace + "/" + kind + "/" + name }

// compiledOwner is a ReservationOwner ready for matching.
type compiledOwner struct {
	owner    schedv1alpha1.ReservationOwner
	selector labels.Selector
}

func compileOwners(owners []schedv1alpha1.ReservationOwner) ([]compiledOwner, error) {
	out := make([]compiledOwner, 0, len(owners))
	for i, o := range owners {
		c := compiledOwner{owner: o}
		if o.LabelSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(o.LabelSelector)
			if err != nil {
				return nil, fmt.Errorf("owners[%d].labelSelector: %w", i, err)
			}
			c.selector = sel
		}
		out = append(out, c)
	}
	return out, nil
}

// matches reports whether pod is selected by the owner.
func (c *compiledOwner) matches(pod *v1.Pod) bool {
	switch o := &c.owner; {
	case o.Object != nil:
		return o.Object.Namespace == pod.Namespace && o.Object.Name == pod.Name &&
			(o.Object.UID == "" || o.Object.UID == pod.UID)
	case o.Controller != nil:
		ref := metav1.GetControllerOf(pod)
		return ref != nil && o.Controller.Namespace == pod.Namespace && ref.Kind == o.Controller.Kind &&
			ref.Name == o.Controller.Name && (o.Controller.UID == "" || o.Controller.UID == ref.UID) &&
			(o.Controller.APIVersion == "" || o.Controller.APIVersion == ref.APIVersion)
	case c.selector != nil:
		return o.Namespace == pod.Namespace && c.selector.Matches(labels.Set(pod.Labels))
	case o.Annotation != nil:
		v, ok := pod.Annotations[o.Annotation.Key]
		return o.Namespace == pod.Namespace && ok && v == o.Annotation.Value
	case o.PodGroup != "":
		return o.Namespace == pod.Namespace && schedv1alpha1.PodGroupOf(pod) == o.PodGroup
	}
	return false
}

func (ix *ownerIndex) add(e *entry) {
	for _, c := range e.owners {
		switch o := c.owner; {
		case o.Object != nil:
			addTo(ix.byPod, podKey(o.Object.Namespace, o.Object.Name), e)
		case o.Controller != nil:
			addTo(ix.byController, controllerKey(o.Controller.Namespace, o.Controller.Kind, o.Controller.Name), e)
		case c.selector != nil:
			groups := ix.bySelector[o.Namespace]
			if groups == nil {
				groups = map[string]*selectorGroup{}
				ix.bySelector[o.Namespace] = groups
			}
			key := c.selector.String()
			g := groups[key]
			if g == nil {
				g = &selectorGroup{selector: c.selector, entries: map[*entry]bool{}}
				groups[key] = g
			}
			g.entries[e] = true
		case o.Annotation != nil:
			addTo(ix.byAnnotation, annotationKey(o.Namespace, o.Annotation.Key, o.Annotation.Value), e)
			ix.annotationKeys[o.Annotation.Key]++
		case o.PodGroup != "":
			addTo(ix.byPodGroup, podKey(o.Namespace, o.PodGroup), e)
		}
	}
}

func (ix *ownerIndex) remove(e *entry) {
	for _, c := range e.owners {
		switch o := c.owner; {
		case o.Object != nil:
			removeFrom(ix.byPod, podKey(o.Object.Namespace, o.Object.Name), e)
		case o.Controller != nil:
			removeFrom(ix.byController, controllerKey(o.Controller.Namespace, o.Controller.Kind, o.Controller.Name), e)
		case c.selector != nil:
			groups := ix.bySelector[o.Namespace]
			key := c.selector.String()
			if g := groups[key]; g != nil {
				delete(g.entries, e)
				if len(g.entries) == 0 {
					delete(groups, key)
				}
			}
			if len(groups) == 0 {
				delete(ix.bySelector, o.Namespace)
			}
		case o.Annotation != nil:
			removeFrom(ix.byAnnotation, annotationKey(o.Namespace, o.Annotation.Key, o.Annotation.Value), e)
			if ix.annotationKeys[o.Annotation.Key]--; ix.annotationKeys[o.Annotation.Key] <= 0 {
				delete(ix.annotationKeys, o.Annotation.Key)
			}
		case o.PodGroup != "":
			removeFrom(ix.byPodGroup, podKey(o.Namespace, o.PodGroup), e)
		}
	}
}

// lookup calls fn for every indexed entry that pod owns (each once), until
// fn returns false.
func (ix *ownerIndex) lookup(pod *v1.Pod, fn func(*entry) bool) {
	var seen map[*entry]bool
	// verify: the index narrows by name, the full owner (UID, API version)
	// decides. A selector group needs no check: its selector matched.
	visit := func(e *entry, verify bool) bool {
		multi := len(e.owners) > 1
		if multi && seen[e] {
			return true
		}
		if verify && !e.ownedBy(pod) {
			return true
		}
		if multi {
			if seen == nil {
				seen = map[*entry]bool{}
			}
			seen[e] = true
		}
		return fn(e)
	}
	for e := range ix.byPod[podKey(pod.Namespace, pod.Name)] {
		if !visit(e, true) {
			return
		}
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		for e := range ix.byController[controllerKey(pod.Namespace, ref.Kind, ref.Name)] {
			if !visit(e, true) {
				return
			}
		}
	}
	if groups := ix.bySelector[pod.Namespace]; len(groups) > 0 {
		set := labels.Set(pod.Labels)
		for _, g := range groups {
			if g.selector.Matches(set) {
				for e := range g.entries {
					if !visit(e, false) {
						return
					}
				}
			}
		}
	}
	for _, key := range ix.podAnnotationKeys(pod) {
		for e := range ix.byAnnotation[key] {
			if !visit(e, false) {
				return
			}
		}
	}
	if g := schedv1alpha1.PodGroupOf(pod); g != "" {
		for e := range ix.byPodGroup[podKey(pod.Namespace, g)] {
			if !visit(e, false) {
				return
			}
		}
	}
}

// podAnnotationKeys returns the byAnnotation keys of pod's annotations
// that some owner names.
func (ix *ownerIndex) podAnnotationKeys(pod *v1.Pod) []string {
	if len(ix.annotationKeys) == 0 || len(pod.Annotations) == 0 {
		return nil
	}
	var out []string
	for k := range ix.annotationKeys {
		if v, ok := pod.Annotations[k]; ok {
			out = append(out, annotationKey(pod.Namespace, k, v))
		}
	}
	return out
}

func addTo(m map[string]map[*entry]bool, key string, e *entry) {
	s := m[key]
	if s == nil {
		s = map[*entry]bool{}
		m[key] = s
	}
	s[e] = true
}

func removeFrom(m map[string]map[*entry]bool, key string, e *entry) {
	if s := m[key]; s != nil {
		delete(s, e)
		if len(s) == 0 {
			delete(m, key)
		}
	}
}

// ownerKeys returns the index buckets pod falls in that hold a reservation
// accepted by usable: pods with the same keys own the same reservations, so
// the keys can stand for the set in a scheduling signature. An object owner
// is one pod's own bucket: such pods never share a signature.
func (ix *ownerIndex) ownerKeys(pod *v1.Pod, usable func(*entry) bool) []string {
	var keys []string
	holds := func(set map[*entry]bool) bool {
		for e := range set {
			if usable(e) {
				for _, c := range e.owners {
					if c.matches(pod) {
						return true
					}
				}
			}
		}
		return false
	}
	if k := podKey(pod.Namespace, pod.Name); holds(ix.byPod[k]) {
		keys = append(keys, "pod:"+k+":"+string(pod.UID))
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if k := controllerKey(pod.Namespace, ref.Kind, ref.Name); holds(ix.byController[k]) {
			keys = append(keys, "controller:"+k+":"+string(ref.UID))
		}
	}
	if groups := ix.bySelector[pod.Namespace]; len(groups) > 0 {
		set := labels.Set(pod.Labels)
		for sel, g := range groups {
			if g.selector.Matches(set) && holds(g.entries) {
				keys = append(keys, "selector:"+pod.Namespace+":"+sel)
			}
		}
	}
	for _, k := range ix.podAnnotationKeys(pod) {
		if holds(ix.byAnnotation[k]) {
			keys = append(keys, "annotation:"+k)
		}
	}
	if g := schedv1alpha1.PodGroupOf(pod); g != "" {
		if k := podKey(pod.Namespace, g); holds(ix.byPodGroup[k]) {
			keys = append(keys, "podgroup:"+k)
		}
	}
	sort.Strings(keys)
	return keys
}
