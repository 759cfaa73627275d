package ratelane

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// warnLooseModes logs a warning when an existing SQLite store, or its data
// directory, can be read or entered by users other than ratelane's. New
// directories and files are created 0700 and 0600 (see sqlite.DirMode and
// sqlite.FileMode); existing ones are left as the operator set them (a
// backup agent's group may need to read them), so a looser mode is
// reported, with the command that tightens it, rather than changed.
func warnLooseModes(log *slog.Logger, region, path string) {
	for _, p := range []string{filepath.Dir(path), path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue // not created yet: it will be created tight
		}
		want := fs.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm()&^want != 0 {
			log.Warn("store file or directory is accessible to other users; it holds every tenant's payloads",
				"region", region, "path", p, "mode", fi.Mode().Perm().String(), "want", want.String(),
				"fix", "chmod "+modeString(want)+" "+p)
		}
	}
}

func modeString(m fs.FileMode) string {
	if m == 0o700 {
		return "700"
	}
	return "600"
}
