package storage

import (
	"reflect"
	"testing"
)

// TestTaskFieldsFollowTaskColumns: the positional scan puts each column of
// taskColumnNames into the field whose db tag names it, and leaves no tagged field out.
func TestTaskFieldsFollowTaskColumns(t *testing.T) {
	var task Task
	v := reflect.ValueOf(&task).Elem()
	tagOf := map[uintptr]string{}
	tagged := 0
	for i := 0; i < v.NumField(); i++ {
		tag := v.Type().Field(i).Tag.Get("db")
		if tag == "" || tag == "-" {
			continue
		}
		tagged++
		tagOf[v.Field(i).Addr().Pointer()] = tag
	}
	fields := taskFields(&task)
	if len(fields) != len(taskColumnNames) || len(fields) != tagged {
		t.Fatalf("%d fields, %d columns in taskColumnNames, %d tagged fields of Task", len(fields), len(taskColumnNames), tagged)
	}
	for i, f := range fields {
		if got := tagOf[reflect.ValueOf(f).Pointer()]; got != taskColumnNames[i] {
			t.Errorf("column %d is %s, scanned into the field tagged %q", i, taskColumnNames[i], got)
		}
	}
	var e endedTask
	ef := endedFields(&e)
	if len(ef) != len(endedColumnNames) || ef[len(ef)-1] != any(&e.WFEffects) || endedColumnNames[len(ef)-1] != "wf_effects" {
		t.Errorf("an ended task's last column is %s, not scanned into WFEffects", endedColumnNames[len(endedColumnNames)-1])
	}
}
