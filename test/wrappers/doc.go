// Package wrappers builds the API objects of Gantry's unit, integration and
// e2e tests, kueue-style: one Make<Type>(...) per API type, setters that
// chain, and Obj() for the object:
//
//	wrappers.MakePod("p", "ns").Gated("q").Requests("cpu", "1").Obj()
//	wrappers.MakeReservation("r", "cpu", "2").OwnerPod("ns", "p").Obj()
//
// Extend these wrappers rather than constructing objects by hand: a setter
// added here serves every test layer. Import the package qualified
// (wrappers.MakePod), never dot-imported, so a reader sees where a builder
// comes from.
//
// The package is test-only: no production package may import it.
package wrappers
