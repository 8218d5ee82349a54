// Package archtest holds the test that keeps the module's imports pointing one way:
// cmd/dcsync → storeurl → the front ends (lock, latch, queue, election, semaphore, rwlock) → the contract (driver) ←
// the stores, with the root package dcsync below them all. TestImportDirection reads the
// import graph from the source files (go/parser, no toolchain or network needed), puts
// every package of the module in a layer, and fails naming each import that points the
// wrong way; docs/ARCHITECTURE.md states the same rules for people.
//
// It exists so that the layering is a test that can fail rather than a wish in a
// document. It is internal because it checks this module's own packages and nothing
// outside the module has a use for it; it has no code outside its test.
package archtest
