package main

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

// The plot is drawn by hand (lines, markers, min–max bars, a fixed-size
// bitmap font) so that regenerating it needs nothing but Go.

var (
	white   = color.RGBA{255, 255, 255, 255}
	black   = color.RGBA{0, 0, 0, 255}
	grid    = color.RGBA{225, 225, 225, 255}
	palette = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}}
)

type panel struct {
	title, xLabel, yLabel string
	series                []series
	// guide, if set, is drawn as a dashed horizontal line with its label.
	guide      float64
	guideLabel string
}

// writePlot draws the panels side by side, each w x h pixels.
func writePlot(out io.Writer, panels []panel, w, h int) error {
	img := image.NewRGBA(image.Rect(0, 0, w*len(panels), h))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	for i, p := range panels {
		drawPanel(img, image.Rect(i*w, 0, (i+1)*w, h), p)
	}
	return png.Encode(out, img)
}

func drawPanel(img *image.RGBA, r image.Rectangle, p panel) {
	// Plot area inside margins for title, labels and ticks.
	area := image.Rect(r.Min.X+70, r.Min.Y+45, r.Max.X-20, r.Max.Y-55)
	text(img, r.Min.X+(r.Dx()-7*len(p.title))/2, r.Min.Y+18, p.title, black)
	text(img, area.Min.X-60, area.Min.Y-10, p.yLabel, black)
	text(img, area.Min.X+(area.Dx()-7*len(p.xLabel))/2, r.Max.Y-12, p.xLabel, black)

	var xs, ys []float64
	for _, s := range p.series {
		for _, pt := range s.points {
			xs = append(xs, pt.x)
			ys = append(ys, slices.Max(pt.y.values))
		}
	}
	if len(xs) == 0 {
		text(img, area.Min.X+10, area.Min.Y+20, "no data", black)
		return
	}
	if p.guide > 0 {
		ys = append(ys, p.guide)
	}
	xMax, yMax := niceCeil(slices.Max(xs)), niceCeil(slices.Max(ys)*1.1)
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

	if p.guide > 0 {
		for x := area.Min.X; x < area.Max.X; x += 12 {
			line(img, x, toY(p.guide), min(x+6, area.Max.X), toY(p.guide), black, 1)
		}
		text(img, area.Max.X-7*len(p.guideLabel)-4, toY(p.guide)+15, p.guideLabel, black)
	}

	for i, s := range p.series {
		c := palette[i%len(palette)]
		for j, pt := range s.points {
			x, y := toX(pt.x), toY(pt.y.mean)
			line(img, x, toY(slices.Min(pt.y.values)), x, toY(slices.Max(pt.y.values)), c, 1)
			line(img, x-4, toY(slices.Min(pt.y.values)), x+4, toY(slices.Min(pt.y.values)), c, 1)
			line(img, x-4, toY(slices.Max(pt.y.values)), x+4, toY(slices.Max(pt.y.values)), c, 1)
			fill(img, image.Rect(x-3, y-3, x+4, y+4), c)
			if j > 0 {
				prev := s.points[j-1]
				line(img, toX(prev.x), toY(prev.y.mean), x, y, c, 2)
			}
		}
		ly := area.Min.Y + 8 + 16*i
		fill(img, image.Rect(area.Min.X+12, ly-4, area.Min.X+26, ly+2), c)
		text(img, area.Min.X+32, ly+3, s.name, black)
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
