package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

func init() {
	registerVerbs("keys", "create, list and revoke API keys through the HTTP API", func() []subcommand {
		return []subcommand{
			{"create", "create an API key (its secret is shown once)", runKeysCreate},
			{"ls", "list API keys (never their secrets)", keysList().run},
			{"revoke", "revoke an API key by id", keysRevoke().run},
		}
	})
}

// keyView is the API's representation of a key; Secret is present only in
// the answer to a create.
type keyView struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Tenant    string   `json:"tenant"`
	Role      string   `json:"role"`
	Regions   []string `json:"regions"`
	CreatedAt string   `json:"created_at"`
	RevokedAt string   `json:"revoked_at"`
}

// keyRequest is the body of POST /v1/keys.
type keyRequest struct {
	Tenant  string   `json:"tenant"`
	Role    string   `json:"role"`
	Regions []string `json:"regions,omitempty"`
	Name    string   `json:"name,omitempty"`
}

func runKeysCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys create", "--tenant T --role producer|worker|admin [flags]", "Create an API key. Its secret is printed once and cannot be shown again.", stderr)
	cf := addClientFlags(fs)
	var req keyRequest
	var regions stringList
	fs.StringVar(&req.Tenant, "tenant", "", "tenant whose jobs the key creates and reads (required)")
	fs.StringVar(&req.Role, "role", "", "producer, worker or admin (required)")
	fs.Var(&regions, "region", "region the key may use; repeat for several; none means every region")
	fs.StringVar(&req.Name, "name", "", "a label for the key")
	if _, err := parseArgs(fs, args); err != nil {
		return err
	}
	switch {
	case req.Tenant == "":
		return usageError{"--tenant is required"}
	case req.Role != "producer" && req.Role != "worker" && req.Role != "admin":
		return usageError{fmt.Sprintf("--role must be producer, worker or admin, not %q", req.Role)}
	}
	req.Regions = regions
	c, err := cf.client(stderr)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/keys", nil, req, nil)
	if err != nil {
		return err
	}
	if cf.json {
		return cf.print(stdout, resp.body)
	}
	var k keyView
	if err := decodeOne(resp.body, &k, "key", "key_info", "info"); err != nil {
		return err
	}
	secret := findSecret(resp.body)
	fmt.Fprintf(stdout, "created key %s (tenant %s, role %s, regions %s)\n", k.ID, k.Tenant, k.Role, regionsText(k.Regions))
	if secret != "" {
		fmt.Fprintf(stdout, "secret, shown only this once:\n\n    %s\n\n", secret)
	}
	return nil
}

// findSecret returns the new key's secret from a create answer. The field
// is looked up under the names an API might reasonably use for it; it is
// recognised by its "rl_" prefix, so an id is never mistaken for it.
func findSecret(body []byte) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return ""
	}
	for _, k := range []string{"secret", "key", "api_key", "token"} {
		var s string
		if json.Unmarshal(obj[k], &s) == nil && strings.HasPrefix(s, "rl_") {
			return s
		}
	}
	return ""
}

func regionsText(r []string) string {
	if len(r) == 0 {
		return "all"
	}
	return strings.Join(r, ",")
}

func keysList() apiCall {
	return apiCall{name: "keys ls", usage: "[flags]", summary: "List API keys, revoked ones included. Secrets are never shown.",
		request: func([]string) (string, string, url.Values, any, error) {
			return http.MethodGet, "/v1/keys", nil, nil, nil
		},
		show: listTable[keyView]{keys: []string{"keys"}, noun: "key",
			header: []string{"ID", "NAME", "TENANT", "ROLE", "REGIONS", "CREATED", "REVOKED"},
			row: func(k keyView) []string {
				return []string{k.ID, cell(k.Name), k.Tenant, k.Role, regionsText(k.Regions), when(k.CreatedAt), when(k.RevokedAt)}
			}}.show}
}

func keysRevoke() apiCall {
	return apiCall{name: "keys revoke", usage: "ID [flags]", summary: "Revoke an API key; every node rejects it within a second.",
		args: []string{"ID"},
		request: func(pos []string) (string, string, url.Values, any, error) {
			return http.MethodDelete, "/v1/keys/" + esc(pos[0]), nil, nil, nil
		},
		done: func(pos []string) string { return "revoked " + pos[0] }}
}
