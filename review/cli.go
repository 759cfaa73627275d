package review

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/review/report"
)

// Commands returns the plug-in's commands of the ratelane binary
// (ratelane.Commander): review, an inline review with no server. The
// server-side verbs (ratelane reviews create|list|get|findings|sarif) are
// a client of the routes and live with the binary's other API clients.
func (p *Plugin) Commands() []ratelane.Command {
	return []ratelane.Command{{Name: "review", Summary: "review a diff inline, with no server (offline rules by default)", Run: runInline}}
}

// usageError is a command-line mistake: the binary exits 2.
type usageError string

func (e usageError) Error() string { return string(e) }

// Is makes a usageError match ratelane.ErrUsage.
func (usageError) Is(target error) bool { return target == ratelane.ErrUsage }

func runInline(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("review", flag.ContinueOnError)
	fs.SetOutput(stderr)
	diffPath := fs.String("diff", "", "the unified diff to review: a file, or - for standard input (git diff | ratelane review -)")
	format := fs.String("format", "table", "output: table, json, rdjsonl or sarif")
	kind := fs.String("provider", "rules", "provider: rules, openai, openai-compatible or anthropic")
	model := fs.String("model", "", "model name (openai, anthropic)")
	baseURL := fs.String("base-url", "", "provider API base URL (required for openai-compatible)")
	depth := fs.String("depth", "full", "full (hunks with context) or fast (added lines only)")
	maxTokens := fs.Int("max-part-tokens", 0, "estimated-token budget of one part (default 8000)")
	asJSON := fs.Bool("json", false, "print JSON: the same as --format json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError(err.Error())
	}
	if *asJSON {
		*format = "json"
	}
	if *diffPath == "" && fs.NArg() == 1 {
		*diffPath = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if *diffPath == "" {
		return usageError("--diff FILE or - is required")
	}
	text, err := readDiff(*diffPath, stdin)
	if err != nil {
		return err
	}
	p, err := provider.New(provider.Profile{Name: "cli", Kind: *kind, Region: "local", Model: *model, BaseURL: *baseURL, APIKey: apiKey(*kind)})
	if err != nil {
		return usageError(err.Error())
	}
	res, err := pipeline.Inline(ctx, p, text, pipeline.InlineOptions{Depth: *depth, MaxPartTokens: *maxTokens})
	if err != nil {
		return err
	}
	if err := printReview(stdout, *format, res); err != nil {
		return err
	}
	// The findings of the parts that succeeded are printed either way; the
	// exit status says the review is incomplete, so a CI gate does not pass
	// a diff nobody (or only partly) reviewed.
	if res.Parts.Failed > 0 && res.Parts.Failed == res.Parts.Total {
		return fmt.Errorf("all %d parts failed; nothing was reviewed", res.Parts.Total)
	}
	if res.Partial {
		return fmt.Errorf("%d of %d parts failed; the findings are partial", res.Parts.Failed, res.Parts.Total)
	}
	return nil
}

func readDiff(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(path)
}

// apiKey reads the provider's key from the environment, never a flag (a
// flag would show in the process list).
func apiKey(kind string) string {
	if k := os.Getenv("RATELANE_REVIEW_API_KEY"); k != "" {
		return k
	}
	if strings.HasPrefix(kind, "anthropic") {
		return os.Getenv("ANTHROPIC_API_KEY")
	}
	return os.Getenv("OPENAI_API_KEY")
}

func printReview(w io.Writer, format string, res pipeline.Result) error {
	switch format {
	case "table":
		return report.WriteText(w, res.Findings)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	case "rdjsonl":
		return report.WriteRDJSONL(w, res.Findings)
	case "sarif":
		return report.WriteSARIF(w, ratelane.Version, res.Findings)
	}
	return usageError(fmt.Sprintf("--format must be table, json, rdjsonl or sarif, not %q", format))
}
