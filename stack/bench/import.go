package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/stack/importer"
)

// Task is a one-shot measurement: it runs once and reports how long it took, against a
// goal. (Scenarios measure rates; a migration of 100,000 keys is one job, timed whole.)
type Task struct {
	Name string
	// Goal is the time the task should stay under.
	Goal time.Duration
	Note string
	Run  func(ctx context.Context, env *Env) (detail string, err error)
}

var (
	tasksMu sync.Mutex
	tasks   []Task
)

// RegisterTask adds a one-shot task; call it from an init function.
func RegisterTask(t Task) {
	tasksMu.Lock()
	defer tasksMu.Unlock()
	tasks = append(tasks, t)
}

// Tasks returns the registered tasks in registration order.
func Tasks() []Task {
	tasksMu.Lock()
	defer tasksMu.Unlock()
	return append([]Task(nil), tasks...)
}

// RunTask runs t once and returns the report's line for it.
func RunTask(ctx context.Context, t Task, env *Env) string {
	start := time.Now()
	detail, err := t.Run(ctx, env)
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		return fmt.Sprintf("- %s: failed after %s: %v", t.Name, took, err)
	}
	verdict := "met"
	if took > t.Goal {
		verdict = "MISSED"
	}
	return fmt.Sprintf("- %s: %s (goal < %s: %s); %s. %s", t.Name, took, t.Goal, verdict, detail, t.Note)
}

// importKeys is the size of the migration the import task times.
const importKeys = 100000

func init() {
	RegisterTask(Task{
		Name: "import 100,000 licenses (keyhousectl's client, calls of 1,000)",
		Goal: 5 * time.Minute,
		Note: "one call at a time, as keyhousectl sends them; each call is one transaction in licensing",
		Run:  runImport,
	})
}

func runImport(ctx context.Context, env *Env) (string, error) {
	run := time.Now().UnixNano()
	ls := make([]importer.License, importKeys)
	limit := 3
	for i := range ls {
		issued := "2024-01-15T10:20:30Z"
		ls[i] = importer.License{
			Key:       fmt.Sprintf("%08X-%04X-4067-A91D-%012X", i, run&0xffff, run&0xffffffffffff),
			ProductID: "bench-import", Tier: "pro", IssuedTo: fmt.Sprintf("buyer%d@example.com", i),
			IssuedAt: &issued, Status: "active", MaxActivations: &limit,
		}
	}
	c := &importer.Client{URL: env.URL, APIKey: env.AdminKey, OnConflict: "fail", HTTP: env.HTTP}
	sum, err := c.Import(ctx, ls)
	if err != nil {
		return "", err
	}
	if sum.Imported != importKeys {
		return "", fmt.Errorf("imported %d of %d (%d invalid)", sum.Imported, importKeys, sum.Invalid)
	}
	return fmt.Sprintf("%d calls, %d retried", sum.Calls, sum.Retries), nil
}
