package main

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// configRow is one row of the README's configuration table.
type configRow struct {
	line     int
	vars     []string // environment variables
	flags    []string // flag names, without the dashes
	defValue string   // the default, backquotes removed
}

var (
	backquotedVar  = regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")
	backquotedFlag = regexp.MustCompile("`--([a-z0-9-]+)`")
	dollarVar      = regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`)
)

// readmeConfigTable returns the rows of the table under "### Configuration" in
// README.md, failing the test unless there is exactly one such table.
func readmeConfigTable(t *testing.T) []configRow {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	start := slices.Index(lines, "### Configuration")
	if start < 0 {
		t.Fatal(`README.md has no "### Configuration" section`)
	}
	var rows []configRow
	tableEnded := false
	for i := start + 1; i < len(lines) && !strings.HasPrefix(lines[i], "#"); i++ {
		line := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(line, "|") {
			tableEnded = tableEnded || len(rows) > 0
			continue
		}
		if tableEnded {
			t.Fatalf("README.md:%d: the configuration table is cut in two (a table row after a gap)", i+1)
		}
		cells := strings.Split(strings.Trim(strings.ReplaceAll(line, `\|`, "\x00"), "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("README.md:%d: want 4 cells (variable, flag, default, meaning), got %d: %s", i+1, len(cells), line)
		}
		if len(rows) == 0 && strings.TrimSpace(cells[0]) == "variable" {
			continue // the header
		}
		if strings.Trim(strings.TrimSpace(cells[0]), "-") == "" && strings.Contains(cells[0], "-") {
			continue // the separator
		}
		r := configRow{line: i + 1, defValue: strings.Trim(strings.TrimSpace(cells[2]), "`")}
		for _, m := range backquotedVar.FindAllStringSubmatch(cells[0], -1) {
			r.vars = append(r.vars, m[1])
		}
		for _, m := range backquotedFlag.FindAllStringSubmatch(cells[1], -1) {
			r.flags = append(r.flags, m[1])
		}
		if len(r.vars) == 0 && len(r.flags) == 0 {
			t.Fatalf("README.md:%d: a configuration row names no variable and no flag: %s", i+1, line)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("README.md: the configuration section has no table")
	}
	return rows
}

// sameDefault reports whether the README's default (a cell) describes a flag's.
func sameDefault(cell, flagDefault string) bool {
	switch cell {
	case "", "(required)":
		return flagDefault == "" || flagDefault == "[]" || flagDefault == "false"
	}
	if a, err := time.ParseDuration(cell); err == nil {
		b, err := time.ParseDuration(flagDefault)
		return err == nil && a == b
	}
	return cell == flagDefault
}

// TestReadmeConfigurationMatchesServe: the README's configuration table lists every
// flag of `taskforge serve` and every environment variable it reads (those its flags'
// help names, and those its own help names), each flag in the row of its variables
// and with its default, and lists nothing serve does not accept.
func TestReadmeConfigurationMatchesServe(t *testing.T) {
	// Defaults are read from the environment: compare them with none of it set.
	cmd := serveCommand()
	var envNames []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		for _, m := range dollarVar.FindAllStringSubmatch(f.Usage, -1) {
			envNames = append(envNames, m[1])
		}
	})
	for _, name := range envNames {
		if _, ok := os.LookupEnv(name); ok {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
	cmd = serveCommand()

	flagEnv := map[string][]string{} // flag name → the variables its help names
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		flagEnv[f.Name] = []string{}
		for _, m := range dollarVar.FindAllStringSubmatch(f.Usage, -1) {
			flagEnv[f.Name] = append(flagEnv[f.Name], m[1])
		}
	})
	// Variables serve reads besides its flags' ones: named in its help.
	otherEnv := map[string]bool{}
	for _, m := range dollarVar.FindAllStringSubmatch(cmd.Long, -1) {
		otherEnv[m[1]] = true
	}

	rows := readmeConfigTable(t)
	listedFlag := map[string]int{}
	listedVar := map[string]int{}
	for _, r := range rows {
		rowEnv := map[string]bool{}
		for _, f := range r.flags {
			if prev, dup := listedFlag[f]; dup {
				t.Errorf("README.md:%d: --%s is listed again (first on line %d)", r.line, f, prev)
			}
			listedFlag[f] = r.line
			envs, ok := flagEnv[f]
			if !ok {
				t.Errorf("README.md:%d: lists --%s, which serve does not accept", r.line, f)
				continue
			}
			for _, e := range envs {
				rowEnv[e] = true
				if !slices.Contains(r.vars, e) {
					t.Errorf("README.md:%d: --%s reads $%s, which its row does not list", r.line, f, e)
				}
			}
			if len(r.flags) == 1 {
				if def := cmd.Flags().Lookup(f).DefValue; !sameDefault(r.defValue, def) {
					t.Errorf("README.md:%d: --%s defaults to %q, the table says %q", r.line, f, def, r.defValue)
				}
			}
		}
		for _, v := range r.vars {
			if prev, dup := listedVar[v]; dup {
				t.Errorf("README.md:%d: $%s is listed again (first on line %d)", r.line, v, prev)
			}
			listedVar[v] = r.line
			if !rowEnv[v] && !(len(r.flags) == 0 && otherEnv[v]) {
				t.Errorf("README.md:%d: lists $%s, which serve does not read (for this row's flags)", r.line, v)
			}
		}
	}
	for _, f := range slices.Sorted(maps.Keys(flagEnv)) {
		if _, ok := listedFlag[f]; !ok {
			t.Errorf("README.md: the configuration table lacks serve's --%s (%v)", f, flagEnv[f])
		}
	}
	for _, v := range slices.Sorted(maps.Keys(otherEnv)) {
		if _, ok := listedVar[v]; !ok {
			t.Errorf("README.md: the configuration table lacks $%s, which serve reads", v)
		}
	}
}
