package asyncpreemption

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gantry-dev/gantry/scheduler/apis/config"
	"github.com/gantry-dev/gantry/scheduler/apis/config/validation"
)

func TestDecodeArgs(t *testing.T) {
	tests := map[string]struct {
		raw     string
		wantErr string
		want    *config.AsyncPreemptionArgs
	}{
		"defaults": {raw: `{}`, want: &config.AsyncPreemptionArgs{MaxConcurrentDeletes: 8, PreemptionTimeout: seconds(30),
			MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}},
		"set": {raw: `{"maxConcurrentDeletes": 2, "preemptionTimeout": "5s"}`,
			want: &config.AsyncPreemptionArgs{MaxConcurrentDeletes: 2, PreemptionTimeout: seconds(5), MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}},
		"with kind": {raw: `{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "AsyncPreemptionArgs", "maxConcurrentDeletes": 3}`,
			want: &config.AsyncPreemptionArgs{MaxConcurrentDeletes: 3, PreemptionTimeout: seconds(30), MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}},
		"zero concurrency":  {raw: `{"maxConcurrentDeletes": 0}`, wantErr: "maxConcurrentDeletes: Invalid value: 0: must be in [1, 1000]"},
		"negative timeout":  {raw: `{"preemptionTimeout": "-1s"}`, wantErr: "preemptionTimeout: Invalid value: \"-1s\": must be positive"},
		"percentage > 100":  {raw: `{"minCandidateNodesPercentage": 101}`, wantErr: "minCandidateNodesPercentage: Invalid value: 101: must be in [0, 100]"},
		"both zero":         {raw: `{"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}`, wantErr: "must not be zero when minCandidateNodesPercentage is zero"},
		"unknown field":     {raw: `{"maxConcurentDeletes": 2}`, wantErr: `unknown field "maxConcurentDeletes"`},
		"not a duration":    {raw: `{"preemptionTimeout": "soon"}`, wantErr: "decoding AsyncPreemption args"},
		"wrong type":        {raw: `{"maxConcurrentDeletes": "many"}`, wantErr: "decoding AsyncPreemption args"},
		"negative absolute": {raw: `{"minCandidateNodesAbsolute": -1}`, wantErr: "minCandidateNodesAbsolute: Invalid value: -1: must not be negative"},
		"other kind":        {raw: `{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "ReservationArgs"}`, wantErr: "want *config.AsyncPreemptionArgs"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(tc.raw), ContentType: runtime.ContentTypeJSON})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			args.TypeMeta = tc.want.TypeMeta
			if *args != *tc.want {
				t.Errorf("args %+v, want %+v", args, tc.want)
			}
		})
	}
	// The framework's usual cases: typed (decoded by the scheme) and nil.
	typed := &config.AsyncPreemptionArgs{MaxConcurrentDeletes: 1, PreemptionTimeout: seconds(1), MinCandidateNodesAbsolute: 1}
	if got, err := DecodeArgs(typed); err != nil || *got != *typed {
		t.Errorf("typed args: %+v, %v", got, err)
	}
	if got, err := DecodeArgs(nil); err != nil || got.MaxConcurrentDeletes != 8 || got.PreemptionTimeout.Duration != 30*time.Second {
		t.Errorf("nil args: %+v, %v", got, err)
	}
}

func seconds(n int) metav1.Duration { return metav1.Duration{Duration: time.Duration(n) * time.Second} }

func FuzzDecodeArgs(f *testing.F) {
	f.Add(`{}`)
	f.Add(`{"maxConcurrentDeletes": 3, "preemptionTimeout": "1m"}`)
	f.Add(`{"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}`)
	f.Add(`{"kind": "AsyncPreemptionArgs", "apiVersion": "kubescheduler.config.k8s.io/v1"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON})
		if err != nil {
			return
		}
		// Whatever decodes must be usable: defaulted and valid.
		if err := validation.ValidateAsyncPreemptionArgs(field.NewPath("args"), args); err != nil {
			t.Fatalf("decoded args fail validation: %v", err)
		}
	})
}
