package event

import "fmt"

// validInstanceID reports whether id is an EC2 instance id: "i-" followed by
// 8 (older) or 17 lowercase hexadecimal digits.
func validInstanceID(id string) bool {
	if len(id) != 2+8 && len(id) != 2+17 || id[0] != 'i' || id[1] != '-' {
		return false
	}
	for i := 2; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checkInstanceID returns an error naming field when id is missing or is
// not an instance id.
func checkInstanceID(field, id string) error {
	if id == "" {
		return fmt.Errorf("%s is missing", field)
	}
	if !validInstanceID(id) {
		return fmt.Errorf("%s %s is not an EC2 instance id (i- and 8 or 17 hex digits)", field, quote(id))
	}
	return nil
}
