package main

// This file is the small HTTP client behind the enqueue, jobs, dlq, limits
// and keys subcommands, and the flag and table helpers they share. The
// client speaks the v1 JSON API only; it knows nothing of stores.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
)

// Environment variables the client reads. The API key is best passed in
// the environment: a --api-key flag is visible to other users in ps.
const (
	envServer = "RATELANE_URL"
	envAPIKey = "RATELANE_API_KEY"
	// envServerOld is the name the client read before RATELANE_URL (the
	// name the README, the examples and the API's curl lines use). It is
	// still read, with a deprecation warning, when RATELANE_URL is unset.
	envServerOld = "RATELANE_SERVER"
)

const defaultServer = "http://127.0.0.1:8080"

// maxResponse bounds what the client reads from a server (a list page of
// jobs with results can be large, but not unbounded).
const maxResponse = 64 << 20

// clientFlags are the flags every client subcommand takes.
type clientFlags struct {
	server setString
	apiKey setString
	// json is set by --json, -o json and -o yaml: print the server's
	// document rather than a table; yaml re-encodes it as YAML.
	json, yaml bool
}

// setString is a string flag that remembers whether it was given, so that
// an explicit empty value (--api-key "") overrides the environment.
type setString struct {
	v   string
	set bool
}

func (s *setString) String() string { return "" } // never a default in usage text

// Get returns the value set, for flag.Getter: what a next-page hint
// repeats (nextPageArgs), where String must stay empty for usage text.
func (s *setString) Get() any { return s.v }

func (s *setString) Set(v string) error {
	s.v, s.set = v, true
	return nil
}

// addClientFlags defines --server, --api-key, --json and -o on fs. The flags'
// defaults are empty on purpose: the flag package prints a default in
// every usage text (-h, any mistyped flag), so the environment is read only
// after parsing, in client, and a secret never becomes a default.
func addClientFlags(fs *flag.FlagSet) *clientFlags {
	cf := &clientFlags{}
	fs.Var(&cf.server, "server", "the ratelane server's `URL` (default $"+envServer+", else "+defaultServer+")")
	fs.Var(&cf.apiKey, "api-key", "the API `KEY` (default $"+envAPIKey+"; prefer the variable: flags show in ps)")
	fs.BoolVar(&cf.json, "json", false, "print the server's JSON instead of a table")
	fs.Func("o", "output `FORMAT`: table (default), json (the same as --json) or yaml", func(v string) error {
		switch v {
		case "table":
			cf.json, cf.yaml = false, false
		case "json":
			cf.json, cf.yaml = true, false
		case "yaml":
			cf.json, cf.yaml = true, true
		default:
			return fmt.Errorf("want table, json or yaml, not %q", v)
		}
		return nil
	})
	return cf
}

// client talks to one ratelane server with one API key.
type client struct {
	base *url.URL
	// serverFrom and keyFrom say where the URL and the key came from (a
	// flag, an environment variable, the default), for error messages that
	// must point at the right setting without showing the key.
	serverFrom, keyFrom string
	apiKey              string
	http                *http.Client
	stderr              io.Writer
}

// client resolves the server and key (flag, else environment, else the
// default server), validates them and returns a client; problems are usage
// errors (exit 2). Messages name the setting, never the key's value.
func (cf *clientFlags) client(stderr io.Writer) (*client, error) {
	server, serverFrom := cf.serverURL(stderr)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not echoed: a mistyped URL may carry credentials.
		return nil, usageError{fmt.Sprintf("the server URL from %s must be an absolute http or https URL, e.g. %s", serverFrom, defaultServer)}
	}
	key, keyFrom := cf.apiKey.v, "--api-key"
	if !cf.apiKey.set {
		key, keyFrom = os.Getenv(envAPIKey), envAPIKey
	}
	if key == "" {
		return nil, usageError{"no API key: set " + envAPIKey + " (or pass --api-key)"}
	}
	return &client{base: u, serverFrom: serverFrom, keyFrom: keyFrom, apiKey: key,
		http: &http.Client{Timeout: 60 * time.Second}, stderr: stderr}, nil
}

// serverURL returns the server URL and where it came from: --server when
// given (even empty), else RATELANE_URL, else the deprecated RATELANE_SERVER
// (with a warning on stderr), else the default.
func (cf *clientFlags) serverURL(stderr io.Writer) (server, from string) {
	if cf.server.set {
		return cf.server.v, "--server"
	}
	if v := os.Getenv(envServer); v != "" {
		return v, envServer
	}
	if v := os.Getenv(envServerOld); v != "" {
		fmt.Fprintf(stderr, "ratelane: %s is deprecated; set %s instead\n", envServerOld, envServer)
		return v, envServerOld
	}
	return defaultServer, "the default; set " + envServer + " or --server"
}

// apiError is returned after the server answered with an error status; the
// problem details have already been printed to stderr.
type apiError struct {
	method, path string
	status       int
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: server answered %d %s", e.method, e.path, e.status, http.StatusText(e.status))
}

// response is a successful answer.
type response struct {
	body   []byte
	header http.Header
}

// do sends one request. body, when not nil, is sent as JSON. A status of
// 400 or more is printed as "error: <title>: <detail>" plus one line per
// field error, and returned as *apiError.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any, header http.Header) (*response, error) {
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "ratelane-cli")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The error names the URL (its password redacted), never the
		// Authorization header.
		return nil, fmt.Errorf("cannot reach the ratelane server at %s (from %s): %w", c.base.Redacted(), c.serverFrom, unwrapURLError(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		printProblem(c.stderr, resp, data)
		if resp.StatusCode == http.StatusUnauthorized {
			fmt.Fprintf(c.stderr, "  the server at %s (from %s) does not accept the API key from %s\n", c.base.Redacted(), c.serverFrom, c.keyFrom)
		}
		return nil, &apiError{method: method, path: path, status: resp.StatusCode}
	}
	return &response{body: data, header: resp.Header}, nil
}

// regions reads the regions the server serves from its discovery document
// (GET /v1, no key needed), quietly: a failure is returned, not printed.
func (c *client) regions(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.JoinPath("/v1").String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "ratelane-cli")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1: %s", resp.Status)
	}
	var d struct {
		Regions []string `json:"regions"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponse)).Decode(&d); err != nil {
		return nil, fmt.Errorf("GET /v1: %w", err)
	}
	return d.Regions, nil
}

// unwrapURLError drops net/http's *url.Error wrapper, whose message repeats
// the method and the full request URL (query included), keeping the cause.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// problem is an RFC 9457 problem document. Field errors are read loosely
// (field or pointer or name; detail or message) so that the CLI prints what
// any reasonable server sends.
type problem struct {
	Title  string            `json:"title"`
	Status int               `json:"status"`
	Detail string            `json:"detail"`
	Errors []json.RawMessage `json:"errors"`
}

func printProblem(w io.Writer, resp *http.Response, data []byte) {
	var p problem
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if (mt != "application/problem+json" && mt != "application/json") || json.Unmarshal(data, &p) != nil || p.Title == "" {
		// Not a problem document (a proxy's error page): show the status and
		// the start of the body, which may explain it.
		text := strings.TrimSpace(string(data))
		if len(text) > 200 {
			text = text[:200] + "..."
		}
		fmt.Fprintf(w, "error: HTTP %d %s: %s\n", resp.StatusCode, http.StatusText(resp.StatusCode), text)
		return
	}
	if p.Detail != "" {
		fmt.Fprintf(w, "error: %s: %s\n", p.Title, p.Detail)
	} else {
		fmt.Fprintf(w, "error: %s\n", p.Title)
	}
	for _, raw := range p.Errors {
		var fe map[string]any
		if json.Unmarshal(raw, &fe) != nil {
			fmt.Fprintf(w, "  %s\n", raw)
			continue
		}
		field := firstString(fe, "field", "pointer", "name", "location")
		detail := firstString(fe, "detail", "message", "reason")
		if field == "" {
			fmt.Fprintf(w, "  %s\n", detail)
		} else {
			fmt.Fprintf(w, "  %s: %s\n", field, detail)
		}
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		fmt.Fprintf(w, "  retry after: %s s\n", ra)
	}
}

func firstString(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := m[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// printJSON writes a response body for --json: the server's JSON, followed
// by a newline.
func printJSON(w io.Writer, body []byte) error {
	_, err := fmt.Fprintf(w, "%s\n", bytes.TrimSpace(body))
	return err
}

// print writes the server's document as -o asked: JSON as sent, or YAML.
func (cf *clientFlags) print(w io.Writer, body []byte) error {
	if !cf.yaml {
		return printJSON(w, body)
	}
	return printYAML(w, body)
}

// printYAML re-encodes a JSON document as block-style YAML. It goes
// through yaml.Node, not map[string]any, so fields keep the server's order
// and numbers keep their digits.
func printYAML(w io.Writer, body []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("the server's answer is not JSON: %w", err)
	}
	blockStyle(&doc)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle drops the flow and quoting styles JSON syntax gave each node,
// so the encoder picks YAML's own (quoting only where a string needs it).
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// decodeList reads a list response: a bare array, or an object holding the
// array under one of keys (else its only array field), with an optional
// next-page cursor. It is deliberately loose about the envelope so the CLI
// keeps working as the API grows fields.
func decodeList(body []byte, keys ...string) (items []json.RawMessage, next string, err error) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		err = json.Unmarshal(body, &items)
		return items, "", err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, "", fmt.Errorf("unexpected response: %w", err)
	}
	for _, k := range []string{"next_cursor", "next", "cursor", "next_after"} {
		if raw, ok := obj[k]; ok && json.Unmarshal(raw, &next) == nil && next != "" {
			break
		}
	}
	for _, k := range append(keys, "items", "data") {
		if raw, ok := obj[k]; ok {
			err = json.Unmarshal(raw, &items)
			return items, next, err
		}
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if raw := bytes.TrimSpace(obj[k]); len(raw) > 0 && raw[0] == '[' {
			err = json.Unmarshal(raw, &items)
			return items, next, err
		}
	}
	return nil, next, nil
}

// decodeOne reads a single object, unwrapping {"<key>": {...}} when the
// server wraps it under one of keys.
func decodeOne(body []byte, v any, keys ...string) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return fmt.Errorf("unexpected response: %w", err)
	}
	for _, k := range keys {
		if inner := bytes.TrimSpace(obj[k]); len(inner) > 0 && inner[0] == '{' {
			return json.Unmarshal(inner, v)
		}
	}
	return json.Unmarshal(body, v)
}

// table writes aligned columns: the header (if any), then rows.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if header != nil {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// cell renders a possibly empty value; "-" keeps columns aligned and
// readable.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// when renders an RFC 3339 timestamp from the API in UTC to the second.
func when(s string) string {
	if s == "" {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// errHelp is returned by parseFlags for -h; helpOK turns it into success.
var errHelp = flag.ErrHelp

// newFlagSet returns a flag set that reports errors instead of exiting, with
// a usage line printed to stderr.
func newFlagSet(name, args, summary string, stderr io.Writer) *flag.FlagSet {
	fs := commandFlags("ratelane "+name, stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ratelane %s %s\n\n%s\n\nFlags:\n", name, args, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, allowing flags after positional arguments
// ("jobs get ID --region eu"), and returns the positional ones. Bad flags
// are usage errors; -h is errHelp.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// parseNoArgs parses args of a command that takes flags only (serve,
// upstream, demo): a bad flag or any argument is a usage error; -h is
// errHelp.
func parseNoArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// parseArgs is parseFlags, then wantArgs over names: the parse of a verb
// whose positional arguments are exactly names.
func parseArgs(fs *flag.FlagSet, args []string, names ...string) ([]string, error) {
	rest, err := parseFlags(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs(fs, rest, names...); err != nil {
		return nil, err
	}
	return rest, nil
}

// parse is parseArgs for a verb that talks to the server, then its client:
// usage errors come before a bad --server or --api-key.
func (cf *clientFlags) parse(fs *flag.FlagSet, args []string, stderr io.Writer, names ...string) ([]string, *client, error) {
	rest, err := parseArgs(fs, args, names...)
	if err != nil {
		return nil, nil, err
	}
	c, err := cf.client(stderr)
	if err != nil {
		return nil, nil, err
	}
	return rest, c, nil
}

// wantArgs checks the number of positional arguments.
func wantArgs(fs *flag.FlagSet, got []string, names ...string) error {
	if len(got) == len(names) {
		return nil
	}
	if len(names) == 0 {
		return usageError{fmt.Sprintf("%s takes no arguments, got %q", fs.Name(), got)}
	}
	return usageError{fmt.Sprintf("%s needs %s", fs.Name(), strings.Join(names, " "))}
}

// subcommand is one verb of a command with verbs (jobs ls, jobs get ...).
type subcommand struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// registerVerbs registers the command name, whose first argument picks
// one of verbs' subcommands. verbs runs anew on every run: each apiCall
// holds its own flag values, and runs (tests run many at once) must not
// share them.
func registerVerbs(name, summary string, verbs func() []subcommand) {
	register(name, summary, func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return dispatch(ctx, name, verbs(), args, stdout, stderr)
	})
}

// dispatch runs the verb named by args[0].
func dispatch(ctx context.Context, command string, subs []subcommand, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, "Usage: ratelane %s <verb> [flags]\n\nVerbs:\n", command)
		for _, s := range subs {
			fmt.Fprintf(stderr, "  %-11s %s\n", s.name, s.summary)
		}
		if len(args) == 0 {
			return usageError{"missing verb"}
		}
		return nil
	}
	for _, s := range subs {
		if s.name == args[0] {
			return helpOK(s.run)(ctx, args[1:], stdout, stderr)
		}
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	return usageError{fmt.Sprintf("unknown verb %q; use one of %s", args[0], strings.Join(names, ", "))}
}

// helpOK makes -h a success: the usage was printed, nothing failed.
func helpOK(run func(context.Context, []string, io.Writer, io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if err := run(ctx, args, stdout, stderr); !errors.Is(err, errHelp) {
			return err
		}
		return nil
	}
}

// stringList is a repeatable string flag (--key a --key b).
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// regionQuery returns ?region=R when region is set.
func regionQuery(region string) url.Values {
	q := url.Values{}
	if region != "" {
		q.Set("region", region)
	}
	return q
}

// pager is a list verb's paging: --after and --limit, defined, checked
// and sent the same way on every list verb of the /v1 list routes (the
// server's page cap is 500).
type pager struct {
	after string
	limit int
}

// flags defines --after and --limit on fs.
func (p *pager) flags(fs *flag.FlagSet) {
	fs.StringVar(&p.after, "after", "", "cursor: list the page after this one")
	fs.IntVar(&p.limit, "limit", 0, "page size, 1 to 500 (server default if 0)")
}

// check refuses a --limit the server would refuse, before asking it.
func (p *pager) check() error {
	if p.limit < 0 || p.limit > 500 {
		return usageError{fmt.Sprintf("--limit must be from 1 to 500 (0: the server's default), got %d", p.limit)}
	}
	return nil
}

// query is the list query: the non-empty filters, then --after and --limit.
func (p *pager) query(filters map[string]string) url.Values {
	q := listQuery(filters, p.limit)
	if p.after != "" {
		q.Set("after", p.after)
	}
	return q
}

// get is a list verb's request (apiCall.request's results): GET path
// with the query over filters, once --limit passed check.
func (p *pager) get(path string, filters map[string]string) (string, string, url.Values, any, error) {
	if err := p.check(); err != nil {
		return "", "", nil, nil, err
	}
	return http.MethodGet, path, p.query(filters), nil, nil
}

// listQuery builds a list endpoint's query from its non-empty filters and
// the page size.
func listQuery(filters map[string]string, limit int) url.Values {
	q := url.Values{}
	for k, v := range filters {
		if v != "" {
			q.Set(k, v)
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// commandFlags is the flag set of the command or verb name: parse errors come
// back to the caller (which exits 2), and usage and errors go to stderr.
func commandFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
