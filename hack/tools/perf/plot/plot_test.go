package plot

import (
	"bytes"
	"image"
	"image/png"
	"testing"
)

func TestWrite(t *testing.T) {
	// One series that breaks at x=5: no line from (4, 10) to (5, 10).
	s := Series{Name: "a", Plain: true}
	for x := 0.0; x <= 10; x++ {
		s.Points = append(s.Points, Point{X: x, Y: 10, Min: 10, Max: 10, Break: x == 5})
	}
	rows := [][]Panel{{{Title: "one", Series: []Series{s}, XMax: 10}, {Title: "empty"}}, {{Title: "alone"}}}
	var b bytes.Buffer
	if err := Write(&b, rows, 200, 150); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, 400, 300) {
		t.Fatalf("bounds %v, want two rows of two 200x150 panels", got)
	}
	// The plot area of a 200x150 panel: x 70..180, y 45..95; y=10 of a
	// y axis to niceCeil(11)=20 is at 95-25=70; x of 4.5 is at 70+49.5.
	isLine := func(x, y int) bool {
		r, g, bl, _ := img.At(x, y).RGBA()
		return r>>8 == 31 && g>>8 == 119 && bl>>8 == 180
	}
	if !isLine(70+22, 70) {
		t.Error("no line between x=2 and x=3")
	}
	if isLine(70+50, 70) {
		t.Error("a line across the break between x=4 and x=5")
	}
	if !isLine(70+55, 70) {
		t.Error("no marker where the line starts anew at x=5")
	}
}

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 0.7: 1, 3: 5, 12: 20, 5000: 5000, 5001: 10000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}
