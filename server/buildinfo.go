package server

import "runtime/debug"

// Build is what the Go toolchain recorded about the running binary.
type Build struct {
	Version   string // module version: a tag, a pseudo-version, or "(devel)"
	Revision  string // VCS revision, empty when built outside a checkout
	Modified  bool   // the working tree had uncommitted changes
	Time      string // VCS commit time (RFC 3339), when known
	GoVersion string
}

// ReadBuild returns the build information of the running binary
// (runtime/debug.ReadBuildInfo); fields it does not know are empty.
func ReadBuild() Build {
	b := Build{Version: "(devel)"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = bi.GoVersion
	if v := bi.Main.Version; v != "" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "vcs.time":
			b.Time = s.Value
		}
	}
	return b
}
