package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/review/finding"
)

func sample() []finding.Finding {
	end, sug := 7, "use parameters"
	return []finding.Finding{
		{Path: "pkg/db.go", Line: 5, EndLine: &end, Severity: finding.SeverityError, Category: finding.CategorySecurity,
			Message: "SQL injection", Evidence: "q", Suggestion: &sug, Confidence: 0.9},
		{Path: "dir with space/a#b.go", Line: 1, Severity: finding.SeverityInfo, Category: finding.CategoryDocs,
			Message: "line1\nline2\x1b[31m", Evidence: "e", Confidence: 0.5},
	}
}

func TestWriteRDJSONL(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteRDJSONL(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	var got []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, m)
	}
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2", len(got))
	}
	d := got[0]
	loc := d["location"].(map[string]any)
	rng := loc["range"].(map[string]any)
	if loc["path"] != "pkg/db.go" || rng["start"].(map[string]any)["line"] != 5.0 || rng["end"].(map[string]any)["line"] != 7.0 {
		t.Errorf("location = %v", loc)
	}
	if d["severity"] != "ERROR" || d["source"].(map[string]any)["name"] != "ratelane" ||
		d["code"].(map[string]any)["value"] != "security" || d["message"] != "SQL injection\nSuggestion: use parameters" {
		t.Errorf("diagnostic = %v", d)
	}
	if got[1]["severity"] != "INFO" || got[1]["location"].(map[string]any)["range"].(map[string]any)["end"] != nil {
		t.Errorf("second diagnostic = %v", got[1])
	}
}

func TestWriteSARIF(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteSARIF(&buf, "1.2.3", sample()); err != nil {
		t.Fatal(err)
	}
	var log struct {
		Schema  string `json:"$schema"`
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string `json:"name"`
					Rules []struct {
						ID string `json:"id"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				RuleIndex int    `json:"ruleIndex"`
				Level     string `json:"level"`
				Message   struct {
					Text string `json:"text"`
				} `json:"message"`
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct {
							URI string `json:"uri"`
						} `json:"artifactLocation"`
						Region struct {
							StartLine int `json:"startLine"`
							EndLine   int `json:"endLine"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(buf.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	if log.Version != "2.1.0" || log.Schema != SARIFSchema || len(log.Runs) != 1 {
		t.Fatalf("log header = %q %q %d runs", log.Version, log.Schema, len(log.Runs))
	}
	run := log.Runs[0]
	if run.Tool.Driver.Name != "ratelane" || len(run.Tool.Driver.Rules) != 7 || len(run.Results) != 2 {
		t.Fatalf("run = %+v", run)
	}
	for i, r := range run.Results {
		if run.Tool.Driver.Rules[r.RuleIndex].ID != r.RuleID {
			t.Errorf("result %d: ruleIndex %d does not name rule %s", i, r.RuleIndex, r.RuleID)
		}
	}
	r0, r1 := run.Results[0], run.Results[1]
	reg := r0.Locations[0].PhysicalLocation.Region
	if r0.Level != "error" || reg.StartLine != 5 || reg.EndLine != 7 {
		t.Errorf("result 0 = %+v", r0)
	}
	if r1.Level != "note" || r1.Locations[0].PhysicalLocation.ArtifactLocation.URI != "dir%20with%20space/a%23b.go" ||
		r1.Locations[0].PhysicalLocation.Region.EndLine != 1 {
		t.Errorf("result 1 = %+v", r1)
	}
}

func TestWriteSARIFEmpty(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteSARIF(&buf, "", nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"results": []`) {
		t.Errorf("empty log has no results array:\n%s", buf.String())
	}
}

func TestWriteText(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteText(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
	}
	if !strings.HasPrefix(lines[0], "SEVERITY") || !strings.Contains(lines[1], "pkg/db.go:5-7") ||
		!strings.Contains(lines[1], "security") || !strings.Contains(lines[2], "line1 line2 [31m") {
		t.Errorf("table:\n%s", buf.String())
	}
	if strings.ContainsRune(buf.String(), 0x1b) {
		t.Error("control character passed through")
	}
	if col := strings.Index(lines[0], "LOCATION"); strings.Index(lines[1], "pkg/db.go") != col {
		t.Errorf("columns not aligned:\n%s", buf.String())
	}
}
