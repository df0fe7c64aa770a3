//go:build !gantry_plant_reservation

package plant

// Reservation is the switch of the bug planted for the Reservation family
// (off in this build): the status controller leaves a consumed allocate-once
// Reservation Available.
const Reservation = false
