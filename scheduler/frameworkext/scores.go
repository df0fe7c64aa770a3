package frameworkext

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// scoreTableVerbosity is the log verbosity of score-debug tables: they are
// detail (one multi-line entry per scored pod), never shown by default.
const scoreTableVerbosity = 2

// logScoreTable logs, at verbosity 2, for one pod, the top n nodes by total
// score with each score plugin's weighted score, as a table. Below that
// verbosity it builds nothing.
func logScoreTable(ctx context.Context, profile string, pod *v1.Pod, scores []fwk.NodePluginScores, n int) {
	logger := klog.FromContext(ctx).V(scoreTableVerbosity)
	if !logger.Enabled() {
		return
	}
	logger.Info("Score debug", "pod", klog.KObj(pod), "profile", profile,
		"nodes", len(scores), "table", "\n"+ScoreTable(scores, n))
}

// ScoreTable formats the top n nodes of scores (highest total first, ties by
// node name) with one column per score plugin, in the order the framework
// ran them. n is clamped to MaxDebugScores.
func ScoreTable(scores []fwk.NodePluginScores, n int) string {
	n = min(n, MaxDebugScores)
	top := slices.Clone(scores)
	slices.SortFunc(top, func(a, b fwk.NodePluginScores) int {
		if a.TotalScore != b.TotalScore {
			if a.TotalScore > b.TotalScore {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(top) > n {
		top = top[:n]
	}
	var plugins []string
	if len(top) > 0 {
		for _, s := range top[0].Scores {
			plugins = append(plugins, s.Name)
		}
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprint(w, "#\tNode\tTotal")
	for _, p := range plugins {
		fmt.Fprintf(w, "\t%s", p)
	}
	fmt.Fprintln(w)
	for i, s := range top {
		fmt.Fprintf(w, "%d\t%s\t%d", i+1, s.Name, s.TotalScore)
		for _, ps := range s.Scores {
			fmt.Fprintf(w, "\t%d", ps.Score)
		}
		fmt.Fprintln(w)
	}
	_ = w.Flush()
	return b.String()
}
