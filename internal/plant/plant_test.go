package plant

import "testing"

// TestNoBugPlanted fails on a build with a planted bug: `make unit` and
// every release build run without the tags.
func TestNoBugPlanted(t *testing.T) {
	if on := Planted(); len(on) > 0 {
		t.Fatalf("this build has planted bugs %v: build without the gantry_plant_* tags", on)
	}
	for name := range Families {
		if _, ok := switches[name]; !ok {
			t.Errorf("family %s has no switch", name)
		}
	}
	if len(switches) != len(Families) {
		t.Errorf("%d switches for %d families", len(switches), len(Families))
	}
}
