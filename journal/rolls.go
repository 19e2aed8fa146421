package journal

import (
	"context"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// rollWrites are the writes of the rolls of a release across the mesh.
type rollWrites struct{ j *Journal }

type rollArgs struct {
	Roll     store.Roll
	ID       int64
	Position int
	State    string
	Cause    string
	Retry    []string
	At       time.Time
}

// aborted is what AbortRoll returns.
type aborted struct {
	roll     store.Roll
	reverted []string
}

var (
	startRoll = op[rollArgs, store.Roll]{"StartRoll", func(ctx context.Context, db *store.DB, a rollArgs) (store.Roll, error) {
		return db.StartRoll(ctx, a.Roll)
	}}
	beginRollStep = op[rollArgs, none]{"BeginRollStep", func(ctx context.Context, db *store.DB, a rollArgs) (none, error) {
		return none{}, db.BeginRollStep(ctx, a.ID, a.Position, a.At)
	}}
	endRollStep = op[rollArgs, none]{"EndRollStep", func(ctx context.Context, db *store.DB, a rollArgs) (none, error) {
		return none{}, db.EndRollStep(ctx, a.ID, a.Position, a.State, a.Cause, a.At)
	}}
	finishRoll = op[rollArgs, none]{"FinishRoll", func(ctx context.Context, db *store.DB, a rollArgs) (none, error) {
		return none{}, db.FinishRoll(ctx, a.ID, a.At)
	}}
	resumeRoll = op[rollArgs, store.Roll]{"ResumeRoll", func(ctx context.Context, db *store.DB, a rollArgs) (store.Roll, error) {
		return db.ResumeRoll(ctx, a.Retry)
	}}
	abortRoll = op[rollArgs, aborted]{"AbortRoll", func(ctx context.Context, db *store.DB, a rollArgs) (aborted, error) {
		r, reverted, err := db.AbortRoll(ctx, a.At)
		return aborted{r, reverted}, err
	}}
)

func rollOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){startRoll.apply, beginRollStep.apply, endRollStep.apply,
		finishRoll.apply, resumeRoll.apply, abortRoll.apply}
}

// StartRoll starts r.
func (w rollWrites) StartRoll(ctx context.Context, r store.Roll) (store.Roll, error) {
	return startRoll.call(ctx, w.j, rollArgs{Roll: r})
}

// BeginRollStep begins the step at position of roll.
func (w rollWrites) BeginRollStep(ctx context.Context, roll int64, position int, at time.Time) error {
	_, err := beginRollStep.call(ctx, w.j, rollArgs{ID: roll, Position: position, At: at})
	return err
}

// EndRollStep ends the step at position of roll in state, for cause.
func (w rollWrites) EndRollStep(ctx context.Context, roll int64, position int, state, cause string, at time.Time) error {
	_, err := endRollStep.call(ctx, w.j, rollArgs{ID: roll, Position: position, State: state, Cause: cause, At: at})
	return err
}

// FinishRoll finishes roll.
func (w rollWrites) FinishRoll(ctx context.Context, roll int64, at time.Time) error {
	_, err := finishRoll.call(ctx, w.j, rollArgs{ID: roll, At: at})
	return err
}

// ResumeRoll resumes the halted roll, retrying the nodes named.
func (w rollWrites) ResumeRoll(ctx context.Context, retry []string) (store.Roll, error) {
	return resumeRoll.call(ctx, w.j, rollArgs{Retry: retry})
}

// AbortRoll aborts the active roll.
func (w rollWrites) AbortRoll(ctx context.Context, at time.Time) (store.Roll, []string, error) {
	a, err := abortRoll.call(ctx, w.j, rollArgs{At: at})
	return a.roll, a.reverted, err
}
