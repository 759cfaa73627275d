package provider

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/ratelane/ratelane/internal/job"
)

// Anthropic calls the Messages API with the official SDK, asking for JSON
// output constrained by finding.StrictSchema (output_config.format). It
// also accepts a plain text answer holding the JSON, which is what older
// models and compatible gateways send; ValidateOutput judges either.
type Anthropic struct {
	sdkCall
	client anthropic.Client
}

func newAnthropic(p Profile) *Anthropic {
	opts := []option.RequestOption{
		option.WithMaxRetries(0), // the queue owns retries
		option.WithAPIKey(p.APIKey),
		option.WithHTTPClient(p.HTTPClient),
		option.WithRequestTimeout(p.Timeout),
	}
	if p.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(p.BaseURL))
	}
	return &Anthropic{sdkCall: newSDKCall(p), client: anthropic.NewClient(opts...)}
}

// Review makes one Messages call.
func (a *Anthropic) Review(ctx context.Context, req Request) (Response, error) {
	system, user := Prompt(req)
	params := anthropic.MessageNewParams{
		Model:        anthropic.Model(a.profile.Model),
		MaxTokens:    int64(a.profile.MaxOutputTokens),
		System:       []anthropic.TextBlockParam{{Text: system}},
		Messages:     []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(user))},
		OutputConfig: anthropic.OutputConfigParam{Format: anthropic.JSONOutputFormatParam{Schema: a.schema}},
	}
	var raw *http.Response
	m, err := a.client.Messages.New(ctx, params, option.WithResponseInto(&raw))
	now := a.now()
	if err != nil {
		return Response{}, a.classify(err, now)
	}
	resp := a.answered(raw, Usage{InputTokens: m.Usage.InputTokens, OutputTokens: m.Usage.OutputTokens}, now)
	var text strings.Builder
	for _, b := range m.Content {
		if b.Type == "text" {
			text.WriteString(b.Text)
		}
	}
	if text.Len() == 0 {
		return resp, invalidOutput("answer has no text", resp)
	}
	resp.Output = []byte(text.String())
	return resp, nil
}

func (a *Anthropic) classify(err error, now time.Time) error {
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		return &Error{Outcome: OutcomeOf(err)}
	}
	return a.apiError(APIError{Status: ae.StatusCode, Type: string(ae.Type()), Message: ae.Message}, ae.Response, now)
}

// invalidOutput is an answer that cannot hold findings: it spends the
// schema budget, never the congestion one.
func invalidOutput(why string, resp Response) error {
	return &Error{Outcome: job.Outcome{Class: job.ClassInvalidOutput, Err: why, Hints: resp.Hints, Usage: resp.Usage.Total()}}
}
