package llmbatch

import (
	"bytes"
	"context"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
)

// formParts reads a multipart/form-data body into its parts, in order.
type formPart struct{ name, filename, contentType, body string }

func formParts(t *testing.T, contentType string, body []byte) []formPart {
	t.Helper()
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		t.Fatal(err)
	}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var parts []formPart
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			return parts
		} else if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, formPart{p.FormName(), p.FileName(), p.Header.Get("Content-Type"), string(b)})
	}
}

// uploadItems is a 100-item review file and its lines as jsonl encodes them.
func uploadItems(t *testing.T, o *OpenAI) ([]Item, string) {
	it := reviewItem(t)
	its := make([]Item, 100)
	for i := range its {
		its[i] = it
	}
	lines, err := o.jsonl(context.Background(), its)
	if err != nil {
		t.Fatal(err)
	}
	return its, lines.String()
}

// TestOpenAIUploadSendsTheSDKsForm checks that Upload sends the form the
// SDK builds from a file (openai.File + MarshalMultipart): the same parts
// in the same order, the file's bytes the lines jsonl encodes, the
// content type on the request.
func TestOpenAIUploadSendsTheSDKsForm(t *testing.T) {
	srv, got := captureServer(t, `{"id":"file-1","object":"file","bytes":1,"created_at":1,"filename":"k.jsonl","purpose":"batch","status":"processed"}`)
	o := NewOpenAI(Config{APIKey: "unused", BaseURL: srv.URL, HTTPClient: srv.Client()})
	its, lines := uploadItems(t, o)
	id, err := o.Upload(t.Context(), "chunk-7", its)
	if err != nil || id != "file-1" {
		t.Fatalf("Upload = %q, %v", id, err)
	}
	req := <-got
	if req.path != "POST /files" {
		t.Fatalf("request %q, want POST /files", req.path)
	}
	ref, refType, err := openai.FileNewParams{File: openai.File(bytes.NewBufferString(lines), "chunk-7.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch}.MarshalMultipart()
	if err != nil {
		t.Fatal(err)
	}
	want := formParts(t, refType, ref)
	have := formParts(t, req.contentType, req.body)
	if len(have) != len(want) {
		t.Fatalf("%d parts, want %d: %+v", len(have), len(want), have)
	}
	for i := range want {
		if have[i] != want[i] {
			t.Fatalf("part %d: got %q %q %q (%d bytes), want %q %q %q (%d bytes)", i, have[i].name, have[i].filename,
				have[i].contentType, len(have[i].body), want[i].name, want[i].filename, want[i].contentType, len(want[i].body))
		}
	}
}

// TestOpenAIUploadBodyAllocatesTheFileOnce bounds the bytes that building
// a 100-item upload body allocates to 1.25 times the body: the lines are
// encoded into the body's one buffer, sized beforehand. Through the SDK's
// copy of a separate lines buffer it was over three times the body (the
// lines' buffer grew by doubling, then the SDK's body buffer did).
func TestOpenAIUploadBodyAllocatesTheFileOnce(t *testing.T) {
	o := NewOpenAI(Config{APIKey: "unused"})
	its, _ := uploadItems(t, o)
	body, _, err := o.uploadBody(context.Background(), "chunk-7", its)
	if err != nil {
		t.Fatal(err)
	}
	// The body's own buffer never doubled (it does not depend on the
	// race detector): the old path's body was a buffer grown by doubling.
	if body.Cap() > body.Len()*5/4 {
		t.Fatalf("uploadBody's buffer: capacity %d for a %d-byte body, want at most 1.25 times", body.Cap(), body.Len())
	}
	if raceEnabled {
		t.Skip("allocation bound: -race drops sync.Pool items, so encoding/json's encoder state is allocated per line")
	}
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := o.uploadBody(context.Background(), "chunk-7", its); err != nil {
				b.Fatal(err)
			}
		}
	})
	if per, limit := res.AllocedBytesPerOp(), int64(body.Len())*5/4; per > limit {
		t.Fatalf("uploadBody allocates %d bytes for a %d-byte body, want at most %d", per, body.Len(), limit)
	}
}

// TestLinesFileReadMatchesWriteTo checks linesFile's Read path (for a
// reader that does not use WriteTo) yields the bytes WriteTo writes.
func TestLinesFileReadMatchesWriteTo(t *testing.T) {
	o := NewOpenAI(Config{APIKey: "unused"})
	its, lines := uploadItems(t, o)
	got, err := io.ReadAll(struct{ io.Reader }{&linesFile{ctx: context.Background(), o: o, items: its, name: "x"}})
	if err != nil || string(got) != lines {
		t.Fatalf("Read: %d bytes, %v; want the %d bytes jsonl encodes", len(got), err, len(lines))
	}
	var w bytes.Buffer
	n, err := (&linesFile{ctx: context.Background(), o: o, items: its, name: "x"}).WriteTo(&w)
	if err != nil || w.String() != lines || n != int64(len(lines)) {
		t.Fatalf("WriteTo = %d, %v; want %d bytes equal to jsonl's", n, err, len(lines))
	}
}

// captured is a request a captureServer received.
type captured struct {
	path        string // method and path: "POST /files"
	contentType string
	body        []byte
}

// captureServer returns a server that answers every request with the
// JSON response and hands the request to the channel (capacity 2), and
// closes it when the test ends.
func captureServer(t *testing.T, response string) (*httptest.Server, <-chan captured) {
	t.Helper()
	got := make(chan captured, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- captured{r.Method + " " + r.URL.Path, r.Header.Get("Content-Type"), b}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, response)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}
