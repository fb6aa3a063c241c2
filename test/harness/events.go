package harness

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// EventFile reads a sample event from the repository's events/ directory and
// fits it to a scene: detail fields replaced by detail, a fresh id and the
// current time (resources naming the old instance are dropped).
func EventFile(name string, detail map[string]string) ([]byte, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "events", name)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading sample event: %w", err)
	}
	var ev map[string]any
	if err := json.Unmarshal(b, &ev); err != nil {
		return nil, fmt.Errorf("sample event %s: %w", name, err)
	}
	d, _ := ev["detail"].(map[string]any)
	if d == nil {
		return nil, fmt.Errorf("sample event %s has no detail", name)
	}
	for k, v := range detail {
		d[k] = v
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	ev["id"] = hex.EncodeToString(id)
	ev["time"] = time.Now().UTC().Format(time.RFC3339)
	ev["resources"] = []string{}
	return json.Marshal(ev)
}

// StateChangeEvent is the EventBridge event of an instance entering state.
func StateChangeEvent(instanceID, state string) ([]byte, error) {
	return EventFile("state-change-stopped.json", map[string]string{"instance-id": instanceID, "state": state})
}
