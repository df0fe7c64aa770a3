// Module perf holds what turns scheduler benchmark output into
// docs/performance.md (perfreport) and benchstat. It is kept out of the root
// module so that its dependencies never move Gantry's.
module github.com/gantry-dev/gantry/hack/tools/perf

go 1.26.0

tool golang.org/x/perf/cmd/benchstat

require (
	golang.org/x/image v0.48.0
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da
)

require github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
