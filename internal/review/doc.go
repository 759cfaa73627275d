// Package review is the home of ratelane's built-in code-review job kind.
//
// The job kind turns a unified diff into validated findings. The work is
// split across pure subpackages so that each step can be tested alone:
//
//   - diff parses a unified git diff into files, hunks and new-side lines.
//   - chunk splits a parsed diff into parts that fit a token budget.
//   - finding defines the Finding schema, validates model output against it,
//     checks findings against the diff and aggregates them across parts.
//   - rules is an offline reviewer that needs no network and no model.
//   - report renders findings as rdjsonl, SARIF 2.1.0 or a text table.
//
// None of these packages log, touch a store or call a provider: handlers
// call them and turn their results into outcomes.
package review
