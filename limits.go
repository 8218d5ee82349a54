package dcsync

import "time"

// Limits on ids. Client and farm ids are short identifiers; names are free text.
const (
	// MaxIDLen is the longest client or farm id, in bytes.
	MaxIDLen = 64
	// MaxNameLen is the longest lock or latch name, in bytes.
	MaxNameLen = 512
	// MaxOwnerLen is the longest lock owner id, in bytes.
	MaxOwnerLen = 128
	// MinTTL is the shortest lease or latch lifetime.
	MinTTL = time.Second
	// MaxTTL is the longest: Aerospike keeps TTLs as 32-bit seconds.
	MaxTTL = time.Duration(1<<31-1) * time.Second
)
