package outcome

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// The bounds of a detail. EventBridge takes at most 256 KB per PutEvents
// request, its entries together; an event is bounded in bytes whatever
// the pods, messages and timeline, and the Publisher splits a request
// that would pass the limit (maxRequestBytes).
const (
	// maxList bounds each list: a 110-pod node's names stay far below
	// the budget
	maxList = 50
	// maxDetailBytes bounds one event's detail: a quarter of a request,
	// so that an invocation's events (up to three) share one
	maxDetailBytes = 64 << 10
	// maxText bounds a text of a list's entry: what holds a pod (an
	// admission webhook's message), a step's detail
	maxText = 1 << 10
	// maxLongText bounds the reason and the evidence
	maxLongText = 4 << 10
)

// trimmed returns the detail with each list cut to maxList entries, each
// text to its bound, then the longest list (in bytes) halved until the
// detail's JSON is within maxDetailBytes, and its JSON; Omitted counts
// the list entries cut. The caller's detail is not changed.
func (d Detail) trimmed() (Detail, []byte, error) {
	d.cutLists(maxList)
	d.Reason, d.Evidence = cutText(d.Reason, maxLongText), cutText(d.Evidence, maxLongText)
	d.Remaining = slices.Clone(d.Remaining)
	for i := range d.Remaining {
		d.Remaining[i].HeldBy = cutText(d.Remaining[i].HeldBy, maxText)
	}
	d.Timeline = slices.Clone(d.Timeline)
	for i := range d.Timeline {
		d.Timeline[i].Detail = cutText(d.Timeline[i].Detail, maxText)
	}
	for {
		b, err := json.Marshal(d)
		switch {
		case err != nil:
			return d, nil, err
		case len(b) <= maxDetailBytes:
			return d, b, nil
		case !d.halveLongestList():
			// not reached: the texts are bounded, and the names (an
			// instance's, a node's, a group's) far below the budget
			return d, nil, fmt.Errorf("detail of %d bytes with every list emptied: over %d", len(b), maxDetailBytes)
		}
	}
}

// cutLists cuts each list to n entries at most, counting what it cut.
func (d *Detail) cutLists(n int) {
	cut := func(l int) int {
		if l <= n {
			return l
		}
		d.Omitted += l - n
		return n
	}
	d.Evicted = d.Evicted[:cut(len(d.Evicted))]
	d.Remaining = d.Remaining[:cut(len(d.Remaining))]
	d.PodsDeleted = d.PodsDeleted[:cut(len(d.PodsDeleted))]
	d.AttachmentsDeleted = d.AttachmentsDeleted[:cut(len(d.AttachmentsDeleted))]
	d.Timeline = d.Timeline[:cut(len(d.Timeline))]
}

// halveLongestList keeps the first half of the list that takes the most
// bytes, counting what it cut; false when every list is empty.
func (d *Detail) halveLongestList() bool {
	type list struct {
		n, bytes int
		keep     func(int)
	}
	strs := func(ss []string) (n int) {
		for _, s := range ss {
			n += len(s) + 3 // quotes and comma
		}
		return n
	}
	var held, steps int
	for _, h := range d.Remaining {
		held += len(h.Pod) + len(h.HeldBy) + 24 // keys, quotes, braces
	}
	for _, s := range d.Timeline {
		steps += len(s.Step) + len(s.Detail) + 44
	}
	lists := []list{
		{len(d.Evicted), strs(d.Evicted), func(k int) { d.Evicted = d.Evicted[:k] }},
		{len(d.Remaining), held, func(k int) { d.Remaining = d.Remaining[:k] }},
		{len(d.PodsDeleted), strs(d.PodsDeleted), func(k int) { d.PodsDeleted = d.PodsDeleted[:k] }},
		{len(d.AttachmentsDeleted), strs(d.AttachmentsDeleted), func(k int) { d.AttachmentsDeleted = d.AttachmentsDeleted[:k] }},
		{len(d.Timeline), steps, func(k int) { d.Timeline = d.Timeline[:k] }},
	}
	longest := slices.MaxFunc(lists, func(a, b list) int { return cmp.Compare(a.bytes, b.bytes) })
	if longest.n == 0 {
		return false
	}
	d.Omitted += longest.n - longest.n/2
	longest.keep(longest.n / 2)
	return true
}

// cutText cuts s to at most n bytes, on a rune's boundary, marking the
// cut with an ellipsis.
func cutText(s string, n int) string {
	const mark = "…"
	if len(s) <= n {
		return s
	}
	end := n - len(mark)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + mark
}
