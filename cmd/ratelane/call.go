package main

// This file is the shared shape of the simpler client verbs: parse flags
// and positional arguments, send one request, print the JSON (-o json) or
// a table. Verbs with more logic (enqueue, jobs ls) keep their own code.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
)

// apiCall describes one request-and-print verb.
type apiCall struct {
	name, usage, summary string
	// args names the positional arguments the verb needs.
	args []string
	// flags defines the verb's own flags on fs; it may be nil.
	flags func(fs *flag.FlagSet)
	// request builds the request from the positional arguments (after the
	// flags were parsed); errors are usage errors.
	request func(pos []string) (method, path string, q url.Values, body any, err error)
	// show prints a successful answer as text; nil prints done.
	show func(w io.Writer, pos []string, body []byte) error
	// done is the line printed after success when show is nil.
	done func(pos []string) string
	// page, when set, prints a list answer in place of show: the table on
	// w, the next-page hint on hint (standard error); again is what the
	// verb was run with, less its cursor (nextPageArgs), for the hint.
	page func(w, hint io.Writer, again []string, body []byte) error
}

// run executes the verb.
func (a apiCall) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(a.name, a.usage, a.summary, stderr)
	cf := addClientFlags(fs)
	if a.flags != nil {
		a.flags(fs)
	}
	rest, err := parseArgs(fs, args, a.args...)
	if err != nil {
		return err
	}
	method, path, q, body, err := a.request(rest)
	if err != nil {
		return err
	}
	c, err := cf.client(stderr)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, method, path, q, body, nil)
	if err != nil {
		return err
	}
	if cf.json {
		if len(resp.body) == 0 {
			// A 204 has no body; -o json still prints a document.
			return cf.print(stdout, []byte(`{}`))
		}
		return cf.print(stdout, resp.body)
	}
	if a.page != nil {
		return a.page(stdout, stderr, nextPageArgs(fs, rest), resp.body)
	}
	if a.show != nil {
		return a.show(stdout, rest, resp.body)
	}
	_, err = fmt.Fprintln(stdout, a.done(rest))
	return err
}

// esc escapes one path segment.
func esc(s string) string { return url.PathEscape(s) }

// showFields prints a JSON object as "field: value" lines, nested objects
// on one line, keys in order; hide lists fields never printed as text.
func showFields(w io.Writer, body []byte, hide ...string) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return fmt.Errorf("unexpected response: %w", err)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rows [][]string
	for _, k := range keys {
		hidden := false
		for _, h := range hide {
			hidden = hidden || h == k
		}
		if hidden {
			continue
		}
		v := compact(obj[k])
		var s string
		if json.Unmarshal(obj[k], &s) == nil {
			v = s
		}
		rows = append(rows, []string{strings.ReplaceAll(k, "_", " ") + ":", cell(v)})
	}
	return table(w, nil, rows)
}

// listTable prints a list answer as a table, one row an item, and the verb
// that fetches the next page when the answer has a cursor. It is the one
// place the list verbs decode and print a page.
type listTable[T any] struct {
	// keys are the fields the items may stand under (see decodeList).
	keys []string
	// noun names one item in the error about a malformed one.
	noun   string
	header []string
	row    func(T) []string
	// more is the verb the next-page hint names; "" prints no hint (the
	// list has no pages).
	more string
	// again is what the verb was run with, less its cursor
	// (nextPageArgs): the hint repeats it, so that the next page keeps
	// the filters, --limit and --region of this one.
	again []string
}

// print writes the page's table to w and the next-page hint to hint.
func (l listTable[T]) print(w, hint io.Writer, body []byte) error {
	items, next, err := decodeList(body, l.keys...)
	if err != nil {
		return err
	}
	rows := make([][]string, len(items))
	for i, raw := range items {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("unexpected %s in response: %w", l.noun, err)
		}
		rows[i] = l.row(v)
	}
	if err := table(w, l.header, rows); err != nil {
		return err
	}
	if l.more != "" {
		moreHint(hint, l.more, l.again, next)
	}
	return nil
}

// page is print as an apiCall's page, the hint repeating again.
func (l listTable[T]) page(w, hint io.Writer, again []string, body []byte) error {
	l.again = again
	return l.print(w, hint, body)
}

// show is print as an apiCall's show, the hint on the same writer.
func (l listTable[T]) show(w io.Writer, _ []string, body []byte) error { return l.print(w, w, body) }

// regionCall is an apiCall on the one resource its positional argument arg
// names: method on path(arg), with a --region flag (regionDoc says what an
// empty one means) sent as ?region=.
func regionCall(name, arg, summary, regionDoc, method string, path func(id string) string, show func(io.Writer, []string, []byte) error) apiCall {
	var region string
	return apiCall{name: name, usage: arg + " [flags]", summary: summary, args: []string{arg},
		flags: func(fs *flag.FlagSet) { fs.StringVar(&region, "region", "", regionDoc) },
		request: func(pos []string) (string, string, url.Values, any, error) {
			return method, path(pos[0]), regionQuery(region), nil, nil
		},
		show: show}
}

// listFilter is one filter of a list verb: a string flag whose name is
// also the query parameter it sets, sent only when not empty.
type listFilter struct{ name, usage string }

// listCall is the one shape of the paged "ls" verbs over a /v1 list route:
// the filters and the shared pager (--after, --limit 1 to 500, checked
// before asking) as flags, GET path, and the page printed by table with
// its next-page hint ("more: ratelane <name> --after C") on standard error.
func listCall[T any](name, summary, path string, filters []listFilter, table listTable[T]) apiCall {
	values := make([]string, len(filters))
	var pg pager
	table.more = name
	return apiCall{name: name, usage: "[flags]", summary: summary,
		flags: func(fs *flag.FlagSet) {
			for i, f := range filters {
				fs.StringVar(&values[i], f.name, "", f.usage)
			}
			pg.flags(fs)
		},
		request: func([]string) (string, string, url.Values, any, error) {
			q := make(map[string]string, len(filters))
			for i, f := range filters {
				q[f.name] = values[i]
			}
			return pg.get(path, q)
		},
		page: table.page}
}

// nextPageArgs is what a list verb was run with, for its next-page hint:
// the positional arguments, then every flag set on fs but --after (the
// hint gives the next cursor), --api-key (a secret is never printed;
// the key comes from the environment or the flag again) and the output
// format (only a table prints a hint), as --name value,
// quoted for a POSIX shell where needed.
func nextPageArgs(fs *flag.FlagSet, pos []string) []string {
	out := make([]string, 0, len(pos)+4)
	for _, p := range pos {
		out = append(out, shellQuote(p))
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "after", "api-key":
			return
		case "o", "json":
			// Only a table prints the hint, and it is the default; -o's
			// value cannot be read back (flag.Func).
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			out = append(out, "--"+f.Name+"="+f.Value.String())
			return
		}
		v := f.Value.String()
		if g, ok := f.Value.(flag.Getter); ok {
			if sv, ok := g.Get().(string); ok {
				v = sv // a value whose String is not what was set (setString)
			}
		}
		out = append(out, "--"+f.Name, shellQuote(v))
	})
	return out
}

// shellQuote returns s as one POSIX shell word: as it is when it holds
// only characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
