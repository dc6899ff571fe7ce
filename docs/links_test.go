// Package docs holds the checks of the Markdown documentation: every relative link
// points at a file that exists, every anchor at a heading that exists, and the
// benchmark reference stays a reference.
package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, from this package's directory.
const root = ".."

// maxBenchmarkLines bounds docs/benchmarks.md: a reference of the benchmarks'
// method and today's figures, not a record of every run (git keeps those).
const maxBenchmarkLines = 400

var (
	inlineLink   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink      = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	codeSpan     = regexp.MustCompile("`[^`]*`")
	headingLine  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	linkInText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	schemePrefix = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// mdFile is what the checks need of one Markdown file.
type mdFile struct {
	anchors map[string]bool
	links   []link
}

// link is one relative link of a file, with its line.
type link struct {
	line   int
	target string
}

// TestLinksResolve fails on a relative link, in any Markdown file of the
// repository, to a file that does not exist, or to an anchor of a Markdown file
// that none of its headings makes.
func TestLinksResolve(t *testing.T) {
	files := map[string]*mdFile{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			f, err := parseMarkdown(path)
			if err != nil {
				return err
			}
			files[filepath.Clean(path)] = f
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files[filepath.Join(root, "docs", "benchmarks.md")]; !ok {
		t.Fatalf("found no docs/benchmarks.md under %s", root)
	}
	for path, f := range files {
		for _, l := range f.links {
			if msg := checkLink(files, path, l.target); msg != "" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: link %q: %s", rel, l.line, l.target, msg)
			}
		}
	}
}

// checkLink says what is wrong with target, a link in the file at from, or "".
func checkLink(files map[string]*mdFile, from, target string) string {
	if schemePrefix.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // another site
	}
	path, frag, _ := strings.Cut(target, "#")
	to := from
	if path != "" {
		to = filepath.Clean(filepath.Join(filepath.Dir(from), filepath.FromSlash(path)))
		if _, err := os.Stat(to); err != nil {
			return "no such file"
		}
	}
	if frag == "" {
		return ""
	}
	f, ok := files[to]
	if !ok {
		return "" // an anchor of a file that is not Markdown: not checked
	}
	if !f.anchors[frag] {
		return "no heading makes this anchor"
	}
	return ""
}

// parseMarkdown reads the anchors a file's headings make, as GitHub renders them,
// and its relative links, leaving out code blocks and code spans.
func parseMarkdown(path string) (*mdFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	f := &mdFile{anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			f.anchors[m[1]] = true
		}
		if m := headingLine.FindStringSubmatch(line); m != nil {
			a := anchor(m[2])
			if k := seen[a]; k > 0 {
				f.anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				f.anchors[a] = true
			}
			seen[a]++
		}
		text := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			f.links = append(f.links, link{n, m[1]})
		}
		if m := refLink.FindStringSubmatch(text); m != nil {
			f.links = append(f.links, link{n, m[1]})
		}
	}
	return f, sc.Err()
}

// anchor is the id GitHub gives a heading: its text without markup, lower case,
// spaces as hyphens, and every character but letters, digits, '-' and '_' dropped.
func anchor(heading string) string {
	heading = linkInText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Method": "method",
		"Where TaskForge stands against River and Asynq":           "where-taskforge-stands-against-river-and-asynq",
		"A plain worker's requests, one by one":                    "a-plain-workers-requests-one-by-one",
		"Scale: do costs follow the work? (`--experiments scale`)": "scale-do-costs-follow-the-work---experiments-scale",
		"Pacing the batches (`TASKFORGE_BULK_DUTY`)":               "pacing-the-batches-taskforge_bulk_duty",
		"See [the API](api.md) — twice":                            "see-the-api--twice",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestBenchmarksIsAReference keeps docs/benchmarks.md within maxBenchmarkLines.
func TestBenchmarksIsAReference(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n > maxBenchmarkLines {
		t.Errorf("docs/benchmarks.md has %d lines, more than %d: keep today's figures and what limits them; dated runs belong in commit messages", n, maxBenchmarkLines)
	}
}
