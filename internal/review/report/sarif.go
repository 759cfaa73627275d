package report

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/ratelane/ratelane/internal/review/finding"
)

// SARIFSchema is the schema URI written into the log's $schema field.
const SARIFSchema = "https://json.schemastore.org/sarif-2.1.0.json"

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool    sarifTool     `json:"tool"`
	Results []sarifResult `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name    string      `json:"name"`
	Version string      `json:"version,omitempty"`
	Rules   []sarifRule `json:"rules"`
}

type sarifText struct {
	Text string `json:"text"`
}

type sarifRule struct {
	ID               string    `json:"id"`
	ShortDescription sarifText `json:"shortDescription"`
}

type sarifResult struct {
	RuleID    string          `json:"ruleId"`
	RuleIndex int             `json:"ruleIndex"`
	Level     string          `json:"level"`
	Message   sarifText       `json:"message"`
	Locations []sarifLocation `json:"locations"`
}

type sarifLocation struct {
	PhysicalLocation struct {
		ArtifactLocation struct {
			URI string `json:"uri"`
		} `json:"artifactLocation"`
		Region struct {
			StartLine int `json:"startLine"`
			EndLine   int `json:"endLine"`
		} `json:"region"`
	} `json:"physicalLocation"`
}

// WriteSARIF writes findings as a SARIF 2.1.0 log with one run. The driver
// is named ToolName (with version when non-empty) and has one rule per
// finding category, in finding.Categories order; each result points at its
// file by a relative URI and at lines startLine..endLine.
func WriteSARIF(w io.Writer, version string, findings []finding.Finding) error {
	run := sarifRun{
		Tool:    sarifTool{Driver: sarifDriver{Name: ToolName, Version: version}},
		Results: make([]sarifResult, 0, len(findings)),
	}
	index := map[finding.Category]int{}
	for i, c := range finding.Categories() {
		index[c] = i
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules,
			sarifRule{ID: string(c), ShortDescription: sarifText{Text: "ratelane " + string(c) + " finding"}})
	}
	for _, f := range findings {
		ri, ok := index[f.Category]
		if !ok {
			ri = -1 // SARIF's "no rule" value
		}
		r := sarifResult{RuleID: string(f.Category), RuleIndex: ri,
			Level: sarifLevel(f.Severity), Message: sarifText{Text: messageWithSuggestion(f)}}
		var loc sarifLocation
		loc.PhysicalLocation.ArtifactLocation.URI = fileURI(f.Path)
		loc.PhysicalLocation.Region.StartLine = f.Line
		loc.PhysicalLocation.Region.EndLine = f.LastLine()
		r.Locations = []sarifLocation{loc}
		run.Results = append(run.Results, r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sarifLog{Schema: SARIFSchema, Version: "2.1.0", Runs: []sarifRun{run}}); err != nil {
		return fmt.Errorf("write sarif: %w", err)
	}
	return nil
}
