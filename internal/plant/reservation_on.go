//go:build gantry_plant_reservation

package plant

// Reservation is on: the status controller leaves a consumed allocate-once
// Reservation Available.
const Reservation = true
