package install

import (
	"reflect"
	"testing"
)

// comparePaths fails t for each way the two paths' creations differ.
func comparePaths(t *testing.T, tf, sam *created) {
	t.Helper()
	a, b := reflect.ValueOf(*tf), reflect.ValueOf(*sam)
	for i := range a.NumField() {
		name := a.Type().Field(i).Name
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			t.Errorf("%s differ:\nterraform %v\nsam       %v", name, a.Field(i).Interface(), b.Field(i).Interface())
		}
	}
}
