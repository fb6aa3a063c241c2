package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// One owner per hook. A hook node-drainer puts names, in its
// NotificationMetadata, the one deployment that put it (by its function's
// name), in a list of one:
//
//	{"node-drainer":["node-drainer-prod"]}
//
// (the form terraform's hook resources write too, main.tf, and the form of
// every mark before one owner per hook). The hook is that deployment's
// alone: only it corrects the hook's settings, and only its removal
// deletes it. A hook of our name that another deployment's mark names, or
// that carries no mark of a deployment (made by hand, by another tool, or
// our key in another case), is not ours: never rewritten, never deleted
// (ARCHITECTURE.md §4 rule 18), and said. So no two deployments write one
// hook: a mark several deployments read, modified and wrote (a shared list
// of owners) raced their uninstalls and left dead owners, whose hook then
// outlived every deployment (C5), and two heartbeats rewrote it at every
// sweep (S9).
//
// A mark from before that names this deployment among others (two
// deployments shared the hook) is left as it is, settings and all; each
// one's removal takes its own name out of it (the rest of the metadata
// byte for byte), and the removal of the last one named deletes the hook.
// Auto Scaling keeps the metadata with the hook and sends it in each
// lifecycle event, where node-drainer does not read it.

// markKey is the key of the mark in a hook's NotificationMetadata, matched
// in this exact case (encoding/json alone would match "Node-Drainer").
const markKey = "node-drainer"

// MaxMetadata is Auto Scaling's limit on a hook's NotificationMetadata, in
// characters: a put past it is refused before it is made.
const MaxMetadata = 1023

// Mark is the NotificationMetadata of a hook owner puts.
func Mark(owner string) string {
	b, _ := json.Marshal(map[string][]string{markKey: {owner}}) // a []string always marshals
	return string(b)
}

// mark is a hook's NotificationMetadata read for node-drainer's mark.
type mark struct {
	meta    string
	owners  []string // the deployments it names
	marked  bool     // a JSON object with markKey once, a list of names
	at, end int      // where the list is in meta
}

// readMark reads h's mark: marked only when its metadata is one JSON
// object with the key markKey, in this case and once, whose value is a
// list of names.
func readMark(h astypes.LifecycleHook) mark {
	none := mark{meta: aws.ToString(h.NotificationMetadata)}
	dec := json.NewDecoder(strings.NewReader(none.meta))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return none
	}
	m := none
	for dec.More() {
		key, err := dec.Token()
		var raw json.RawMessage
		if err == nil {
			err = dec.Decode(&raw)
		}
		switch {
		case err != nil || key == markKey && m.marked: // the key twice: no mark to go by
			return none
		case key != markKey:
			continue
		}
		if json.Unmarshal(raw, &m.owners) != nil || m.owners == nil {
			return none
		}
		m.marked, m.end = true, int(dec.InputOffset())
		m.at = m.end - len(raw)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return none
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) { // nothing after it
		return none
	}
	return m
}

// with is the metadata with the mark naming owners instead, every other
// byte as it was.
func (m mark) with(owners []string) string {
	b, _ := json.Marshal(owners) // a []string always marshals
	return m.meta[:m.at] + string(b) + m.meta[m.end:]
}

// standing is what a hook of our name is to a deployment.
type standing int

const (
	ours     standing = iota // its mark names the deployment alone
	shared                   // a mark from before one owner per hook: the deployment among others
	anothers                 // its mark names other deployments only
	unmarked                 // no mark of a deployment
)

// of says what the hook is to owner (or to replaces, owner's former name),
// and the other deployments its mark names.
func (m mark) of(owner, replaces string) (standing, []string) {
	if !m.marked {
		return unmarked, nil
	}
	var others []string
	for _, o := range m.owners {
		if o != owner && (o != replaces || replaces == "") && !slices.Contains(others, o) {
			others = append(others, o)
		}
	}
	switch {
	case len(others) == len(m.owners) && len(others) > 0:
		return anothers, others
	case len(others) == len(m.owners):
		return unmarked, nil // a mark naming no one
	case len(others) > 0:
		return shared, others
	}
	return ours, nil
}

// step is what ensureGroup does with a hook wanted: put in (nil: nothing),
// or leave the hook there (left, why; refuse: it is another deployment's,
// or none's, and a stack listing its group is refused).
type step struct {
	in     *autoscaling.PutLifecycleHookInput
	left   string
	refuse bool
}

// plan is the step for want over cur (nil: no hook of its name on group).
// Only a hook the deployment owns alone is written: created marked its
// own, its settings corrected (its metadata byte for byte), its mark moved
// from the function's former name (Replaces). A shared mark from before
// has only that move; its settings are the others' too.
func (want Hook) plan(cur *astypes.LifecycleHook, group string) step {
	in := &autoscaling.PutLifecycleHookInput{AutoScalingGroupName: aws.String(group), LifecycleHookName: aws.String(want.Name),
		LifecycleTransition: aws.String(want.Transition), HeartbeatTimeout: aws.Int32(want.HeartbeatTimeout), DefaultResult: aws.String(want.DefaultResult)}
	if cur == nil {
		in.NotificationMetadata = aws.String(Mark(want.Owner))
		return step{in: in}
	}
	m := readMark(*cur)
	st, others := m.of(want.Owner, want.Replaces)
	hook := "hook " + want.Name + " on group " + group
	switch st {
	case ours:
		in.NotificationMetadata = aws.String(m.meta)
		if want.Replaces != "" && slices.Contains(m.owners, want.Replaces) {
			in.NotificationMetadata = aws.String(m.with([]string{want.Owner}))
		}
		if matches(*cur, want) && aws.ToString(in.NotificationMetadata) == m.meta {
			return step{}
		}
		return step{in: in}
	case shared:
		left := hook + " is shared with " + strings.Join(others, ", ") + " (a mark from before one owner per hook): left as it is, its settings not corrected; " +
			"each deployment's removal takes its name out, the last one's deletes it"
		if want.Replaces == "" || !slices.Contains(m.owners, want.Replaces) {
			return step{left: left}
		}
		return step{in: again(*cur, group, m.with(renamed(m.owners, want.Replaces, want.Owner))), left: left}
	case anothers:
		return step{left: hook + " belongs to deployment " + strings.Join(others, ", ") + ": two deployments cannot share a hook; " +
			"give one of them other hook names (TerminateHookName/LaunchHookName) or remove the other first", refuse: true}
	}
	return step{left: hook + " carries no node-drainer deployment's mark in its NotificationMetadata (made by hand or by another tool): " +
		"not this deployment's to change or delete; delete it once no instance waits under it, or give this deployment other hook names (TerminateHookName/LaunchHookName)", refuse: true}
}

// renamed is owners with from named to instead, once.
func renamed(owners []string, from, to string) []string {
	next := slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == from || o == to })
	return append(next, to)
}

// again is the put of h on group as it is, with metadata meta.
func again(h astypes.LifecycleHook, group, meta string) *autoscaling.PutLifecycleHookInput {
	return &autoscaling.PutLifecycleHookInput{AutoScalingGroupName: aws.String(group), LifecycleHookName: h.LifecycleHookName,
		LifecycleTransition: h.LifecycleTransition, HeartbeatTimeout: h.HeartbeatTimeout, DefaultResult: h.DefaultResult,
		NotificationTargetARN: h.NotificationTargetARN, RoleARN: h.RoleARN, NotificationMetadata: aws.String(meta)}
}

// fits refuses a put Auto Scaling would refuse for its metadata's length
// (S2), before it is made.
func fits(in *autoscaling.PutLifecycleHookInput) error {
	if n := utf8.RuneCountInString(aws.ToString(in.NotificationMetadata)); n > MaxMetadata {
		return fmt.Errorf("lifecycle hook %s not put: its NotificationMetadata would be %d characters, past Auto Scaling's limit of 1,023", aws.ToString(in.LifecycleHookName), n)
	}
	return nil
}
