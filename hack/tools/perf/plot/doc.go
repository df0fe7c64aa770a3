// Package plot draws the line charts of Gantry's generated pages
// (docs/performance.png by perfreport, docs/reliability.png by soakreport)
// as PNG. It draws by hand (lines, markers, min–max bars, a fixed-size
// bitmap font) so that regenerating a page needs nothing but Go, and the
// same input always gives the same bytes.
package plot
