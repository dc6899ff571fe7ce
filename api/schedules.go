package api

import (
	"github.com/taskforge/taskforge/internal/view"

	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/scheduler"
	"github.com/taskforge/taskforge/storage"
)

// scheduleFields are the fields of a schedule that POST and PATCH may set.
type scheduleFields struct {
	Queue          Nullable[string]          `json:"queue"`
	Cron           Nullable[string]          `json:"cron"`
	Timezone       Nullable[string]          `json:"timezone"`
	Payload        Nullable[json.RawMessage] `json:"payload"`
	Priority       Nullable[int]             `json:"priority"`
	MaxRetries     Nullable[int]             `json:"max_retries"`
	TimeoutSeconds Nullable[int]             `json:"timeout_seconds"`
	Group          Nullable[string]          `json:"group"`
	Paused         Nullable[bool]            `json:"paused"`
}

type createScheduleRequest struct {
	Name string `json:"name"`
	scheduleFields
}

// apply validates the fields present and writes them into sch.
func (f scheduleFields) apply(sch *storage.Schedule, maxPayload int64) error {
	if f.Queue.Set {
		if !f.Queue.Valid || !queueNamePattern.MatchString(f.Queue.Value) {
			return invalid("queue must name a queue (%s)", queueNamePattern)
		}
		sch.Queue = f.Queue.Value
	}
	if f.Cron.Set {
		if !f.Cron.Valid {
			return invalid("cron must be a cron expression")
		}
		sch.Cron = f.Cron.Value
	}
	if f.Timezone.Set {
		if !f.Timezone.Valid {
			return invalid("timezone must be an IANA time zone name, or absent for UTC")
		}
		sch.Timezone = f.Timezone.Value
	}
	if f.Payload.Set {
		// A JSON null arrives as not Valid: it is a payload like any other JSON value.
		p := f.Payload.Value
		if !f.Payload.Valid {
			p = json.RawMessage("null")
		}
		if int64(len(p)) > maxPayload {
			return tooLarge("payload is %d bytes; the limit is %d", len(p), maxPayload)
		}
		sch.Payload = p
	}
	if f.Priority.Set {
		if !f.Priority.Valid || f.Priority.Value < 1 || f.Priority.Value > 10 {
			return invalid("priority must be an integer from 1 (highest) to 10 (lowest)")
		}
		sch.Priority = f.Priority.Value
	}
	if f.MaxRetries.Set {
		if f.MaxRetries.Valid && (f.MaxRetries.Value < 0 || f.MaxRetries.Value > 100) {
			return invalid("max_retries must be an integer from 0 to 100, or null for the queue's default")
		}
		sch.MaxRetries = f.MaxRetries.Ptr()
	}
	if f.TimeoutSeconds.Set {
		if f.TimeoutSeconds.Valid && (f.TimeoutSeconds.Value < 1 || f.TimeoutSeconds.Value > 7*24*3600) {
			return invalid("timeout_seconds must be an integer from 1 to %d, or null", 7*24*3600)
		}
		sch.TimeoutSeconds = f.TimeoutSeconds.Ptr()
	}
	if f.Group.Set {
		if f.Group.Valid && !storage.ValidGroupName(f.Group.Value) {
			return invalid("group must be 1 to %d characters of A-Z, a-z, 0-9 and . _ : @ -, or null", storage.MaxGroupLen)
		}
		sch.Group = f.Group.Ptr()
	}
	if f.Paused.Set {
		if !f.Paused.Valid {
			return invalid("paused must be true or false")
		}
		sch.Paused = f.Paused.Value
	}
	return nil
}

// reschedule validates sch's cron and timezone and sets its next tick after now.
func reschedule(sch *storage.Schedule, now time.Time) error {
	if err := scheduler.Reschedule(sch, now); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func (s *Server) scheduleChanged() {
	if s.cfg.Scheduler != nil {
		s.cfg.Scheduler.Wake()
	}
}

func (s *Server) createSchedule(c *gin.Context) {
	var req createScheduleRequest
	if err := decode(c, s.cfg.MaxPayloadBytes+64<<10, &req); err != nil {
		s.fail(c, err)
		return
	}
	if !queueNamePattern.MatchString(req.Name) {
		s.fail(c, invalid("name is required and must match %s", queueNamePattern))
		return
	}
	if !req.Queue.Set {
		s.fail(c, invalid("queue is required"))
		return
	}
	if !req.Cron.Set {
		s.fail(c, invalid("cron is required"))
		return
	}
	if !req.Payload.Set {
		s.fail(c, invalid("payload is required (any JSON value)"))
		return
	}
	sch := storage.Schedule{Name: req.Name, Timezone: "UTC", Priority: 5}
	if err := req.apply(&sch, s.cfg.MaxPayloadBytes); err != nil {
		s.fail(c, err)
		return
	}
	if sch.Timezone == "" {
		sch.Timezone = "UTC"
	}
	now, err := s.store.Now(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := reschedule(&sch, now); err != nil {
		s.fail(c, err)
		return
	}
	created, err := s.store.CreateSchedule(c.Request.Context(), sch)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.scheduleChanged()
	c.JSON(http.StatusCreated, created)
}

func (s *Server) listSchedules(c *gin.Context) {
	list, err := s.store.ListSchedules(c.Request.Context(), c.Query("queue"))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"schedules": list})
}

func (s *Server) getSchedule(c *gin.Context) {
	sch, err := s.store.GetSchedule(c.Request.Context(), c.Param("name"))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, sch)
}

// updateSchedule applies a PATCH. A change of cron, timezone or pause state
// recomputes next_run_at from now (it takes effect from the next tick); other changes
// leave it, so a tick that is due but not yet fired still fires, with the new fields.
func (s *Server) updateSchedule(c *gin.Context) {
	var req scheduleFields
	if err := decode(c, s.cfg.MaxPayloadBytes+64<<10, &req); err != nil {
		s.fail(c, err)
		return
	}
	sch, err := s.store.UpdateSchedule(c.Request.Context(), c.Param("name"), func(sch *storage.Schedule, now time.Time) error {
		before := *sch
		if err := req.apply(sch, s.cfg.MaxPayloadBytes); err != nil {
			return err
		}
		if sch.Timezone == "" {
			sch.Timezone = "UTC"
		}
		if sch.Cron == before.Cron && sch.Timezone == before.Timezone && sch.Paused == before.Paused {
			return nil
		}
		return reschedule(sch, now)
	})
	if err != nil {
		s.fail(c, err)
		return
	}
	s.scheduleChanged()
	c.JSON(http.StatusOK, sch)
}

func (s *Server) deleteSchedule(c *gin.Context) {
	if err := s.store.DeleteSchedule(c.Request.Context(), c.Param("name")); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// triggerSchedule enqueues the schedule's task now; its next tick is unchanged.
func (s *Server) triggerSchedule(c *gin.Context) {
	task, err := s.lc.TriggerSchedule(c.Request.Context(), c.Param("name"))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, view.Task(task))
}
