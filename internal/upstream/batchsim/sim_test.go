package batchsim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var start = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

type bundle struct {
	clock *batchsim.Clock
	sim   *batchsim.Server
	oai   openai.Client
	ant   anthropic.Client
}

func setup(t *testing.T, cfg batchsim.Config) *bundle {
	t.Helper()
	clock := batchsim.NewClock(start)
	cfg.Now, cfg.APIKey = clock.Now, "sk-test"
	sim, err := batchsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := testkit.ServerClient(t, sim, 30*time.Second)
	return &bundle{clock: clock, sim: sim,
		oai: openai.NewClient(option.WithBaseURL(sim.URL()+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0), option.WithHTTPClient(hc)),
		ant: anthropic.NewClient(aoption.WithBaseURL(sim.URL()+"/"), aoption.WithAPIKey("sk-test"), aoption.WithMaxRetries(0), aoption.WithHTTPClient(hc)),
	}
}

// jsonl builds an input file of n chat requests.
func jsonl(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"q%d"}]}}`+"\n", i, i)
	}
	return b.String()
}

func (b *bundle) openAIBatch(t *testing.T, input string) *openai.Batch {
	t.Helper()
	ctx := context.Background()
	f, err := b.oai.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(input), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	if f.Bytes != int64(len(input)) || f.Purpose != openai.FileObjectPurposeBatch {
		t.Errorf("file object %+v", f)
	}
	bt, err := b.oai.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return bt
}

func (b *bundle) getOpenAI(t *testing.T, id string) *openai.Batch {
	t.Helper()
	bt, err := b.oai.Batches.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return bt
}

// TestOpenAIStatusTransitions walks a batch through validating,
// in_progress (counts growing), finalizing and completed by the clock.
func TestOpenAIStatusTransitions(t *testing.T) {
	t.Parallel()
	b := setup(t, batchsim.Config{})
	bt := b.openAIBatch(t, jsonl(10))
	if bt.Status != openai.BatchStatusValidating || bt.ExpiresAt != start.Add(24*time.Hour).Unix() {
		t.Fatalf("new batch: %s expires %d", bt.Status, bt.ExpiresAt)
	}
	steps := []struct {
		at        time.Duration
		status    openai.BatchStatus
		completed int64
	}{
		{59 * time.Second, openai.BatchStatusValidating, 0},
		{time.Minute, openai.BatchStatusInProgress, 0},
		{6 * time.Minute, openai.BatchStatusInProgress, 5},
		{11 * time.Minute, openai.BatchStatusFinalizing, 10},
		{12 * time.Minute, openai.BatchStatusCompleted, 10},
	}
	for _, s := range steps {
		b.clock.Set(start.Add(s.at))
		got := b.getOpenAI(t, bt.ID)
		if got.Status != s.status || got.RequestCounts.Completed != s.completed || got.RequestCounts.Total != 10 {
			t.Errorf("at %s: %s completed %d/%d, want %s %d/10", s.at, got.Status, got.RequestCounts.Completed, got.RequestCounts.Total, s.status, s.completed)
		}
		if (got.OutputFileID != "") != (s.status == openai.BatchStatusCompleted) {
			t.Errorf("at %s: output_file_id %q", s.at, got.OutputFileID)
		}
	}
	done := b.getOpenAI(t, bt.ID)
	if done.ErrorFileID != "" || done.InProgressAt != start.Add(time.Minute).Unix() || done.CompletedAt != start.Add(12*time.Minute).Unix() {
		t.Errorf("completed batch: error file %q in_progress_at %d completed_at %d", done.ErrorFileID, done.InProgressAt, done.CompletedAt)
	}
	resp, err := b.oai.Files.Content(context.Background(), done.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var order []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int                   `json:"status_code"`
				Body       openai.ChatCompletion `json:"body"`
			} `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Response.StatusCode != 200 || l.Response.Body.Choices[0].Message.Content != `{"findings":[]}` {
			t.Errorf("line %s: %d %+v", l.CustomID, l.Response.StatusCode, l.Response.Body.Choices)
		}
		order = append(order, l.CustomID)
	}
	sorted := slices.Clone(order)
	slices.Sort(sorted)
	if len(order) != 10 || slices.Equal(order, sorted) && slices.Equal(order, []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"}) {
		t.Errorf("output lines %v: want all 10, not in submission order", order)
	}
}

// TestOpenAIInvalidInputFails: a malformed input file fails the batch
// after validation, with errors naming the lines.
func TestOpenAIInvalidInputFails(t *testing.T) {
	t.Parallel()
	b := setup(t, batchsim.Config{})
	input := jsonl(1) + strings.NewReplacer(`/v1/chat/completions`, `/v1/embeddings`, `"r0"`, `"r1"`).Replace(jsonl(1)) + "not json\n" + jsonl(1)
	bt := b.openAIBatch(t, input)
	b.clock.Advance(time.Minute)
	got := b.getOpenAI(t, bt.ID)
	if got.Status != openai.BatchStatusFailed || got.FailedAt == 0 {
		t.Fatalf("status %s", got.Status)
	}
	var codes []string
	for _, e := range got.Errors.Data {
		codes = append(codes, fmt.Sprintf("%s@%d", e.Code, e.Line))
	}
	if !slices.Equal(codes, []string{"mismatched_endpoint@2", "invalid_json_line@3", "duplicate_custom_id@4"}) {
		t.Errorf("errors %v", codes)
	}
}

// TestOpenAICreateChecks: the create refuses a wrong window, a 429 comes
// with Retry-After, and a wrong key is 401.
func TestOpenAICreateChecks(t *testing.T) {
	t.Parallel()
	b := setup(t, batchsim.Config{})
	ctx := context.Background()
	_, err := b.oai.Batches.New(ctx, openai.BatchNewParams{InputFileID: "file-x", Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "48h"})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "completion_window" {
		t.Errorf("48h window: %v", err)
	}
	b.sim.RejectCreates(batchsim.ProviderOpenAI, 1, 1500*time.Millisecond)
	_, err = b.oai.Batches.New(ctx, openai.BatchNewParams{InputFileID: "file-x", Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Response.Header.Get("Retry-After") != "2" || apiErr.Response.Header.Get("retry-after-ms") != "1500" {
		t.Errorf("rejected create: %v", err)
	}
	_, err = b.oai.Batches.Get(ctx, "batch_x", option.WithAPIKey("wrong"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Errorf("wrong key: %v", err)
	}
}

func anthropicRequests(n int) []anthropic.MessageBatchNewParamsRequest {
	reqs := make([]anthropic.MessageBatchNewParamsRequest, n)
	for i := range reqs {
		reqs[i] = anthropic.MessageBatchNewParamsRequest{CustomID: fmt.Sprintf("r%d", i), Params: anthropic.MessageBatchNewParamsRequestParams{
			Model: "m", MaxTokens: 16, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("q"))}}}
	}
	return reqs
}

// TestAnthropicCountsAndRetention: every request counts as processing
// until the batch ends; results are served for 29 days after creation.
func TestAnthropicCountsAndRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, batchsim.Config{Fault: func(r batchsim.FaultRequest) batchsim.Fault {
		if r.CustomID == "r1" {
			return batchsim.FaultServerError
		}
		return batchsim.FaultNone
	}})
	ctx := context.Background()
	bt, err := b.ant.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: anthropicRequests(4)})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(9 * time.Minute)
	mid, err := b.ant.Messages.Batches.Get(ctx, bt.ID, anthropic.MessageBatchGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if mid.ProcessingStatus != anthropic.MessageBatchProcessingStatusInProgress || mid.RequestCounts.Processing != 4 || mid.RequestCounts.Succeeded != 0 || mid.ResultsURL != "" {
		t.Errorf("in progress: %s %+v results_url %q", mid.ProcessingStatus, mid.RequestCounts, mid.ResultsURL)
	}
	b.clock.Advance(time.Minute)
	end, err := b.ant.Messages.Batches.Get(ctx, bt.ID, anthropic.MessageBatchGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	c := end.RequestCounts
	if end.ProcessingStatus != anthropic.MessageBatchProcessingStatusEnded || c.Processing != 0 || c.Succeeded != 3 || c.Errored != 1 || end.ResultsURL == "" || !end.EndedAt.Equal(start.Add(10*time.Minute)) {
		t.Errorf("ended: %s %+v results_url %q ended_at %v", end.ProcessingStatus, c, end.ResultsURL, end.EndedAt)
	}
	kinds := map[string]string{}
	stream := b.ant.Messages.Batches.ResultsStreaming(ctx, bt.ID, anthropic.MessageBatchResultsParams{})
	for stream.Next() {
		r := stream.Current()
		kinds[r.CustomID] = r.Result.Type
		if r.Result.Type == "errored" && r.Result.AsErrored().Error.Error.Type != "api_error" {
			t.Errorf("errored type %q", r.Result.AsErrored().Error.Error.Type)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if len(kinds) != 4 || kinds["r1"] != "errored" || kinds["r0"] != "succeeded" {
		t.Errorf("results %v", kinds)
	}
	b.clock.Set(start.Add(29 * 24 * time.Hour))
	stream = b.ant.Messages.Batches.ResultsStreaming(ctx, bt.ID, anthropic.MessageBatchResultsParams{})
	defer stream.Close()
	var apiErr *anthropic.Error
	if stream.Next() || !errors.As(stream.Err(), &apiErr) || apiErr.StatusCode != 404 {
		t.Errorf("results after 29 days: %v", stream.Err())
	}
	gone, err := b.ant.Messages.Batches.Get(ctx, bt.ID, anthropic.MessageBatchGetParams{})
	if err != nil || !gone.ArchivedAt.Equal(start.Add(29*24*time.Hour)) {
		t.Errorf("archived_at %v, err %v", gone.ArchivedAt, err)
	}
}

// TestAnthropicCreateLimits: over the request count or the byte size, or
// with a bad custom_id, the create is refused and nothing is created.
func TestAnthropicCreateLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, batchsim.Config{Limits: batchsim.Limits{AnthropicMaxRequests: 3, AnthropicMaxBytes: 2000}})
	ctx := context.Background()
	var apiErr *anthropic.Error
	if _, err := b.ant.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: anthropicRequests(4)}); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("4 requests over a limit of 3: %v", err)
	}
	big := anthropicRequests(1)
	big[0].Params.System = []anthropic.TextBlockParam{{Text: strings.Repeat("s", 3000)}}
	if _, err := b.ant.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: big}); !errors.As(err, &apiErr) || apiErr.StatusCode != 413 {
		t.Errorf("3 kB body over 2000 bytes: %v", err)
	}
	bad := anthropicRequests(1)
	bad[0].CustomID = "has space"
	if _, err := b.ant.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: bad}); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("bad custom_id: %v", err)
	}
	if n := b.sim.Stats().AnthropicBatches; n != 0 {
		t.Errorf("%d batches created by refused creates", n)
	}
}
