package main

import (
	"fmt"
	"os"
)

// runPortable implements `aspd export` and `aspd import` (placeholder until
// the portable format lands).
func runPortable(cmd string, args []string) int {
	fmt.Fprintf(os.Stderr, "aspd %s: not implemented yet\n", cmd)
	return 2
}
