package main

import (
	"fmt"
	"io"

	"github.com/aspd/aspd/server"
)

// printVersion writes `aspd version`: the module version and the VCS
// revision the binary was built from (with "modified" when the working tree
// had uncommitted changes, and the commit time when known), from the build
// information the Go toolchain embeds.
func printVersion(w io.Writer, bi server.Build) {
	fmt.Fprintf(w, "aspd %s\n", bi.Version)
	if bi.Revision != "" {
		rev := bi.Revision
		if bi.Modified {
			rev += " (modified)"
		}
		fmt.Fprintf(w, "revision: %s\n", rev)
	}
	if bi.Time != "" {
		fmt.Fprintf(w, "commit time: %s\n", bi.Time)
	}
	if bi.GoVersion != "" {
		fmt.Fprintf(w, "go: %s\n", bi.GoVersion)
	}
}
