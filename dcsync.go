// Package dcsync is the vocabulary every user of dcsync shares: the scope of a lock or
// latch ([Key]: client id, farm id, [Level], name), the limits on what a key may hold,
// and the one [Error] type with its [Code]s and sentinels for errors.Is.
//
// The primitives live in their own packages: lock, latch and queue. A store is opened
// with storeurl.Open (or a store package's New) and handed to them. What a back end
// implements, and the helpers back ends share, are in package driver, as
// database/sql/driver is to database/sql; a user of dcsync names only driver.Store
// from it, the type of the store value.
package dcsync

import (
	"fmt"
	"strings"
)

// Level is the scope of a lock or latch: one data center (farm) or all of them.
type Level int

const (
	// DC scopes a lock or latch to one farm. A DC latch reads and writes the caller's
	// farm cell only; a DC lock's key includes the farm, so two farms hold independent
	// locks of one name.
	DC Level = iota + 1
	// XDC scopes a lock or latch to all farms. An XDC latch still writes the caller's
	// farm cell but reads the sum of every farm's cell; an XDC lock has one holder
	// across all farms.
	XDC
)

// String returns "DC" or "XDC".
func (l Level) String() string {
	switch l {
	case DC:
		return "DC"
	case XDC:
		return "XDC"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// ParseLevel parses "dc" or "xdc" (any case).
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(s) {
	case "dc":
		return DC, nil
	case "xdc":
		return XDC, nil
	}
	return 0, &Error{Code: InvalidArgument, Op: "dcsync.ParseLevel", Msg: fmt.Sprintf("level %q is not dc or xdc", s)}
}

// Key names one lock or latch in a store: who owns it (Client), where the caller runs
// (Farm), its Level and its Name. Farm is always the caller's farm, also for XDC: an XDC
// latch writes the caller's farm cell, and an XDC lock records which farm holds it.
type Key struct {
	Level  Level
	Client string
	Farm   string
	Name   string
}

// String renders the key for logs and errors, such as "DC/dc1/orders/batch-42".
func (k Key) String() string {
	return k.Level.String() + "/" + k.Farm + "/" + k.Client + "/" + k.Name
}
