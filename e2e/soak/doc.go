// Package soak runs Gantry under mixed tenant work for a long time while
// its components are killed and restarted on a seeded schedule, and judges
// the cluster with test/soak/invariants throughout and at the end. Its
// files build with the soak tag only: the suite runs on demand (`make
// soak`), never in `make test`.
package soak
