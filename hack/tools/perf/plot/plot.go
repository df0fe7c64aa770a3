package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"slices"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

var (
	white   = color.RGBA{255, 255, 255, 255}
	black   = color.RGBA{0, 0, 0, 255}
	grid    = color.RGBA{225, 225, 225, 255}
	palette = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}}
)

// Panel is one chart: its series on axes that start at 0.
type Panel struct {
	Title, XLabel, YLabel string
	Series                []Series
	// Guide, if above 0, is drawn as a dashed horizontal line with
	// GuideLabel.
	Guide      float64
	GuideLabel string
	// XMax, if above 0, is the right end of the x axis; otherwise the
	// largest x rounded up to 1, 2 or 5 times a power of ten.
	XMax float64
}

// Series is one line of a panel, drawn in the next colour of the palette
// and named in the legend.
type Series struct {
	Name   string
	Points []Point
	// Plain draws the line alone (for long time series): no marker and no
	// min–max bar at each point, only a marker where the line breaks.
	Plain bool
}

// Point is a point of a series: Y is drawn as a marker joined to the
// previous point, with a bar from Min to Max (set both to Y for none).
type Point struct {
	X, Y, Min, Max float64
	// Break leaves the point unjoined to the previous one: the line starts
	// anew (a restarted process, say).
	Break bool
}

// Write draws rows of panels, each panel w x h pixels, and encodes them as
// PNG.
func Write(out io.Writer, rows [][]Panel, w, h int) error {
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	img := image.NewRGBA(image.Rect(0, 0, w*cols, h*len(rows)))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	for j, r := range rows {
		for i, p := range r {
			drawPanel(img, image.Rect(i*w, j*h, (i+1)*w, (j+1)*h), p)
		}
	}
	return png.Encode(out, img)
}

func drawPanel(img *image.RGBA, r image.Rectangle, p Panel) {
	// Plot area inside margins for title, labels and ticks.
	area := image.Rect(r.Min.X+70, r.Min.Y+45, r.Max.X-20, r.Max.Y-55)
	text(img, r.Min.X+(r.Dx()-7*len(p.Title))/2, r.Min.Y+18, p.Title, black)
	text(img, area.Min.X-60, area.Min.Y-10, p.YLabel, black)
	text(img, area.Min.X+(area.Dx()-7*len(p.XLabel))/2, r.Max.Y-12, p.XLabel, black)

	var xs, ys []float64
	for _, s := range p.Series {
		for _, pt := range s.Points {
			xs = append(xs, pt.X)
			ys = append(ys, pt.Max)
		}
	}
	if len(xs) == 0 {
		text(img, area.Min.X+10, area.Min.Y+20, "no data", black)
		return
	}
	if p.Guide > 0 {
		ys = append(ys, p.Guide)
	}
	xMax, yMax := p.XMax, niceCeil(slices.Max(ys)*1.1)
	if xMax <= 0 {
		xMax = niceCeil(slices.Max(xs))
	}
	toX := func(x float64) int { return area.Min.X + int(math.Round(x/xMax*float64(area.Dx()))) }
	toY := func(y float64) int { return area.Max.Y - int(math.Round(y/yMax*float64(area.Dy()))) }

	for i := 0; i <= 5; i++ {
		y := yMax * float64(i) / 5
		line(img, area.Min.X, toY(y), area.Max.X, toY(y), grid, 1)
		label := fmt.Sprintf("%.0f", y)
		text(img, area.Min.X-8-7*len(label), toY(y)+4, label, black)
		x := xMax * float64(i) / 5
		line(img, toX(x), area.Max.Y, toX(x), area.Max.Y+5, black, 1)
		label = fmt.Sprintf("%.0f", x)
		text(img, toX(x)-7*len(label)/2, area.Max.Y+20, label, black)
	}
	line(img, area.Min.X, area.Max.Y, area.Max.X, area.Max.Y, black, 1)
	line(img, area.Min.X, area.Min.Y, area.Min.X, area.Max.Y, black, 1)

	if p.Guide > 0 {
		for x := area.Min.X; x < area.Max.X; x += 12 {
			line(img, x, toY(p.Guide), min(x+6, area.Max.X), toY(p.Guide), black, 1)
		}
		text(img, area.Max.X-7*len(p.GuideLabel)-4, toY(p.Guide)+15, p.GuideLabel, black)
	}

	for i, s := range p.Series {
		c := palette[i%len(palette)]
		for j, pt := range s.Points {
			x, y := toX(pt.X), toY(pt.Y)
			switch {
			case !s.Plain:
				line(img, x, toY(pt.Min), x, toY(pt.Max), c, 1)
				line(img, x-4, toY(pt.Min), x+4, toY(pt.Min), c, 1)
				line(img, x-4, toY(pt.Max), x+4, toY(pt.Max), c, 1)
				fill(img, image.Rect(x-3, y-3, x+4, y+4), c)
			case pt.Break && j > 0:
				fill(img, image.Rect(x-2, y-2, x+3, y+3), c)
			}
			if j > 0 && !pt.Break {
				prev := s.Points[j-1]
				line(img, toX(prev.X), toY(prev.Y), x, y, c, 2)
			}
		}
		ly := area.Min.Y + 8 + 16*i
		fill(img, image.Rect(area.Min.X+12, ly-4, area.Min.X+26, ly+2), c)
		text(img, area.Min.X+32, ly+3, s.Name, black)
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= v {
			return m * pow
		}
	}
	return 10 * pow
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// line draws from (x0,y0) to (x1,y1) (Bresenham), width pixels thick.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		for i := 0; i < width; i++ {
			for j := 0; j < width; j++ {
				img.SetRGBA(x0+i, y0+j, c)
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
