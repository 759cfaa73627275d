package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/ratelane/ratelane/internal/review/finding"
)

// OpenAI calls the chat completions API of OpenAI or of any
// OpenAI-compatible endpoint with the official SDK, asking for strict
// structured output (finding.StrictSchema).
type OpenAI struct {
	sdkCall
	client openai.Client
}

func newOpenAI(p Profile) *OpenAI {
	opts := []option.RequestOption{
		// The queue owns retries: a retry inside the SDK would hold the
		// lease and hide the 429 from admission.
		option.WithMaxRetries(0),
		option.WithAPIKey(p.APIKey),
		option.WithHTTPClient(p.HTTPClient),
		option.WithRequestTimeout(p.Timeout),
	}
	if p.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(p.BaseURL))
	}
	return &OpenAI{sdkCall: newSDKCall(p), client: openai.NewClient(opts...)}
}

// SchemaName is the findings schema's name in a structured-output request
// (OpenAI's json_schema.name), in both lanes.
const SchemaName = "review_findings_v1"

// ResponseSchema returns finding.StrictSchema decoded: the schema a review
// answer is asked to match, in the interactive lane (each provider decodes
// it once) and in the batch lane's requests. Each call returns a new map.
func ResponseSchema() map[string]any {
	var m map[string]any
	if err := json.Unmarshal(finding.StrictSchema(), &m); err != nil {
		panic("provider: embedded strict schema is not JSON: " + err.Error())
	}
	return m
}

// Review makes one chat completion call.
func (o *OpenAI) Review(ctx context.Context, req Request) (Response, error) {
	system, user := Prompt(req)
	params := openai.ChatCompletionNewParams{
		Model:               o.profile.Model,
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user)},
		MaxCompletionTokens: openai.Int(int64(o.profile.MaxOutputTokens)),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
				Name: SchemaName, Strict: openai.Bool(true), Schema: o.schema,
			},
		}},
	}
	var raw *http.Response
	c, err := o.client.Chat.Completions.New(ctx, params, option.WithResponseInto(&raw))
	now := o.now()
	if err != nil {
		return Response{}, o.classify(err, now)
	}
	resp := o.answered(raw, Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}, now)
	if len(c.Choices) == 0 {
		return resp, invalidOutput("answer has no choices", resp)
	}
	msg := c.Choices[0].Message
	if msg.Refusal != "" {
		return resp, invalidOutput("model refused", resp)
	}
	resp.Output = []byte(msg.Content)
	return resp, nil
}

func (o *OpenAI) classify(err error, now time.Time) error {
	var ae *openai.Error
	if !errors.As(err, &ae) {
		return &Error{Outcome: OutcomeOf(err)}
	}
	return o.apiError(APIError{Status: ae.StatusCode, Type: ae.Type, Code: ae.Code, Message: ae.Message}, ae.Response, now)
}
