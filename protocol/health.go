package protocol

// OperatorHealth is the answer to GET /admin/v1/health: the process's live
// delivery gauges and counters and the store's status, for the web console's
// health page. Counters run from the process start; a rate is the
// difference of two samples over their SampledAt difference.
type OperatorHealth struct {
	SampledAt       int64       `json:"sampled_at"` // epoch milliseconds
	Connections     int         `json:"connections"`
	AgentsOnline    int         `json:"agents_online"`
	EventsCommitted int64       `json:"events_committed"` // committed events handed to live delivery since start
	EventsDelivered int64       `json:"events_delivered"` // events written to WebSocket connections since start
	SlowConsumers   int64       `json:"slow_consumers"`   // connections closed 1008 slow consumer since start
	LiveTranscripts int         `json:"live_transcripts"` // open operator live transcripts (GET .../events/live)
	Store           StoreHealth `json:"store"`
	// Chorus is the webhook outbox's backlog; absent when Chorus is off
	// (no key) or its backlog could not be read.
	Chorus *ChorusHealth `json:"chorus,omitempty"`
}

// ChorusHealth is the Chorus outbox's backlog (docs/chorus.md).
type ChorusHealth struct {
	Pending             int64 `json:"pending"`               // deliveries due or waiting for a retry
	OldestPendingMillis int64 `json:"oldest_pending_age_ms"` // age of the oldest pending delivery; 0 when none
}

// StoreHealth is the store's answer to a ping.
type StoreHealth struct {
	Dialect    string `json:"dialect"` // "postgres" or "sqlite"
	Status     string `json:"status"`  // "ok" or "unavailable"
	PingMillis int64  `json:"ping_ms"` // how long the ping took
}

// AdminSession is one row of the operator's session listing (GET
// /admin/v1/sessions): the session, and its activity, computed from the
// log for the console's list.
type AdminSession struct {
	Session
	MessageCount   int64 `json:"message_count"`    // session.message events in the log
	LastSequence   int64 `json:"last_sequence"`    // the log's last sequence
	LastActivityAt int64 `json:"last_activity_at"` // created_at of the last event, epoch ms
}
