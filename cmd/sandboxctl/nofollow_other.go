//go:build !unix

package main

// oNoFollow is not available here; the walk's own check (it never
// follows a symlink it sees) is what holds.
const oNoFollow = 0
