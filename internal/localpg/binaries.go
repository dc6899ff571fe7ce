package localpg

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// debianBinGlob is where Debian's postgresql-NN packages install the server
// programs.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// errNoBinaries is returned by FindBinaries; its text names the package to
// install.
var errNoBinaries = errors.New("PostgreSQL server programs (initdb, pg_ctl, postgres) not found on PATH or in " +
	debianBinGlob + ": install the Debian package `postgresql`")

// serverPrograms are the programs a bin directory must hold.
var serverPrograms = []string{"initdb", "pg_ctl", "postgres"}

// FindBinaries returns the directory holding the PostgreSQL server programs
// initdb, pg_ctl and postgres.
//
// It first looks up initdb on PATH; symbolic links are followed, and the
// directory is taken only if the real initdb there is a native executable
// with pg_ctl and postgres beside it (so wrapper scripts, such as Debian's
// pg_wrapper, are skipped). Otherwise it takes the newest version under
// /usr/lib/postgresql/*/bin. When none is found, the error says to install
// the Debian package `postgresql`.
func FindBinaries() (dir string, err error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			if d := filepath.Dir(real); isBinDir(d) {
				return d, nil
			}
		}
	}
	for _, d := range debianBinDirs() {
		if isBinDir(d) {
			return d, nil
		}
	}
	return "", errNoBinaries
}

// debianBinDirs returns the existing /usr/lib/postgresql/*/bin directories,
// newest version first.
func debianBinDirs() []string {
	dirs, _ := filepath.Glob(debianBinGlob)
	sort.SliceStable(dirs, func(i, j int) bool {
		return versionLess(versionOfDir(dirs[j]), versionOfDir(dirs[i]))
	})
	return dirs
}

// versionOfDir returns the version component of /usr/lib/postgresql/V/bin.
func versionOfDir(dir string) string { return filepath.Base(filepath.Dir(dir)) }

// versionLess compares dotted numeric versions ("9.6" < "15"); non-numeric
// parts compare as 0.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// isBinDir reports whether dir holds native executables for every server
// program.
func isBinDir(dir string) bool {
	for _, name := range serverPrograms {
		if !isNativeExecutable(filepath.Join(dir, name)) {
			return false
		}
	}
	return true
}

// isNativeExecutable reports whether path (after symlinks) is an executable
// ELF file, as opposed to a shell or Perl wrapper.
func isNativeExecutable(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := f.Read(magic); err != nil {
		return false
	}
	return bytes.Equal(magic, []byte("\x7fELF"))
}

// binVersionMajor returns the major version of the postgres program in dir
// ("15" for 15.4, "9.6" for 9.6.24), as written in a cluster's PG_VERSION.
func binVersionMajor(dir string) (string, error) {
	// --version is answered before postgres checks for root.
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return "", fmt.Errorf("postgres --version: unexpected output %q", out)
	}
	v := strings.Split(fields[2], ".")
	if n, _ := strconv.Atoi(v[0]); n < 10 && len(v) > 1 {
		return v[0] + "." + v[1], nil
	}
	return v[0], nil
}

// binariesForCluster returns a bin directory whose major version matches the
// cluster in dataDir (PG_VERSION holds e.g. "15"): the found one if it
// matches, else /usr/lib/postgresql/<version>/bin if installed.
func binariesForCluster(found, dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if err != nil {
		return "", err
	}
	want := strings.TrimSpace(string(b))
	have, err := binVersionMajor(found)
	if err != nil {
		return "", err
	}
	if have == want {
		return found, nil
	}
	if d := filepath.Join("/usr/lib/postgresql", want, "bin"); isBinDir(d) {
		return d, nil
	}
	return "", fmt.Errorf("cluster in %s was made by PostgreSQL %s, but the programs in %s are version %s and no version %s is installed: install the Debian package `postgresql-%s` or remove the data directory",
		dataDir, want, found, have, want, want)
}
