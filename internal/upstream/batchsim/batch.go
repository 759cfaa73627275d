package batchsim

import (
	"encoding/json"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// simRequest is one request of a batch as the simulator keeps it.
type simRequest struct {
	customID string
	req      upstream.LLMRequest
	fault    Fault
	// invalid, when set, is why the request's params are unusable: it is
	// answered as a permanent per-request error, as both providers do for
	// params they only check when they process the request.
	invalid string
	// finish is when processing of this request ends; zero for a request
	// that never finishes (FaultExpire).
	finish time.Time
}

// batchError is one entry of an OpenAI batch's errors.data.
type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// simBatch is one batch of either provider. Its status is a function of
// the clock (phase), so nothing runs in the background.
type simBatch struct {
	provider string
	id       string
	created  time.Time
	reqs     []simRequest
	start    time.Time // processing starts
	expires  time.Time // created + Window

	// OpenAI only.
	endpoint    string
	inputFileID string
	window      string
	metadata    map[string]string
	invalid     []batchError // non-empty: the batch fails when validation ends

	cancelAt time.Time // zero unless cancelled

	// Set once, the first time the batch is seen ended.
	materialized bool
	outputFileID string
	errorFileID  string
	results      []byte // Anthropic results JSONL
}

// schedule spreads the finish times of the processable requests evenly
// over processFor from b.start.
func (b *simBatch) schedule(processFor time.Duration) {
	var n int
	for _, r := range b.reqs {
		if r.fault != FaultExpire {
			n++
		}
	}
	k := 0
	for i := range b.reqs {
		if b.reqs[i].fault == FaultExpire {
			continue
		}
		k++
		b.reqs[i].finish = b.start.Add(time.Duration(int64(processFor) * int64(k) / int64(n)))
	}
}

// naturalEnd is when processing of every request that can finish ends,
// and whether that happens within the window (false: the batch expires
// at b.expires).
func (b *simBatch) naturalEnd() (time.Time, bool) {
	last := b.start
	for _, r := range b.reqs {
		if r.finish.IsZero() {
			return b.expires, false
		}
		if r.finish.After(last) {
			last = r.finish
		}
	}
	if last.After(b.expires) {
		return b.expires, false
	}
	return last, true
}

// cutoff is the instant after which no request finishes: the cancel, the
// window's end, or never (the zero time) while neither applies.
func (b *simBatch) cutoff() time.Time {
	if !b.cancelAt.IsZero() {
		return b.cancelAt
	}
	return b.expires
}

// doneBy reports whether request r finished by t (and before the cutoff).
func (b *simBatch) doneBy(r simRequest, t time.Time) bool {
	if r.finish.IsZero() {
		return false
	}
	return !r.finish.After(t) && !r.finish.After(b.cutoff())
}

// shuffled returns the indexes of b.reqs in a fixed order that is not the
// submission order: both providers say results may come in any order, and
// a client that relies on order should fail against the simulator too.
func (b *simBatch) shuffled() []int {
	idx := make([]int, len(b.reqs))
	keys := make([]uint64, len(b.reqs))
	for i, r := range b.reqs {
		idx[i] = i
		h := fnv.New64a()
		h.Write([]byte(r.customID))
		keys[i] = h.Sum64()
	}
	slices.SortFunc(idx, func(a, c int) int {
		switch {
		case keys[a] < keys[c]:
			return -1
		case keys[a] > keys[c]:
			return 1
		}
		return a - c
	})
	return idx
}

// chatParams is the part of a chat request (an OpenAI chat completions
// body or an Anthropic Messages params object) the simulator reads.
type chatParams struct {
	Model     string                 `json:"model"`
	Messages  []upstream.WireMessage `json:"messages"`
	System    json.RawMessage        `json:"system"`
	MaxTokens *int64                 `json:"max_tokens"`
	Stream    bool                   `json:"stream"`
	// ResponseFormat (OpenAI) and OutputConfig (Anthropic) carry a
	// structured-output request (see structured).
	ResponseFormat json.RawMessage `json:"response_format"`
	OutputConfig   json.RawMessage `json:"output_config"`
}

// parseParams reads raw into the responder's view of the request and says
// what is wrong with it ("" when nothing is). requireMax is Anthropic's
// rule that max_tokens is required and at least 1 in a batch.
func parseParams(raw json.RawMessage, provider string, requireMax bool) (upstream.LLMRequest, string) {
	var p chatParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return upstream.LLMRequest{Provider: provider}, "body is not a JSON object"
	}
	req := upstream.LLMRequest{Provider: provider, Model: p.Model}
	switch {
	case p.Model == "":
		return req, "model: field required"
	case len(p.Messages) == 0:
		return req, "messages: at least one message is required"
	case p.Stream:
		return req, "stream: streaming is not supported in batches"
	case requireMax && (p.MaxTokens == nil || *p.MaxTokens < 1):
		return req, "max_tokens: must be at least 1 in a batch"
	}
	schema, why := structured(p, provider)
	if why != "" {
		return req, why
	}
	req.Schema = schema
	var system []string
	if text, ok := upstream.ContentText(p.System); ok && text != "" {
		system = append(system, text)
	}
	for _, m := range p.Messages {
		text, ok := upstream.ContentText(m.Content)
		if !ok {
			return req, "messages: content must be a string or an array of parts"
		}
		if m.Role == "system" || m.Role == "developer" {
			system = append(system, text)
			continue
		}
		req.Messages = append(req.Messages, upstream.Message{Role: m.Role, Text: text})
	}
	req.System = strings.Join(system, "\n")
	return req, ""
}

// estimateTokens approximates a token count as one per four bytes.
func estimateTokens(texts ...string) int64 {
	var n int64
	for _, t := range texts {
		n += int64(len(t))
	}
	return max(1, (n+3)/4)
}

func promptTokens(req upstream.LLMRequest) int64 {
	texts := []string{req.System}
	for _, m := range req.Messages {
		texts = append(texts, m.Text)
	}
	return estimateTokens(texts...)
}
