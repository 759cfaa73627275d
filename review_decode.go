package ratelane

import (
	"encoding/json"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/pipeline"
)

func decodeArgs(j *job.Job) (pipeline.Args, error) {
	var a pipeline.Args
	err := json.Unmarshal(j.Payload, &a)
	return a, err
}

func decodeResult(j *job.Job) (pipeline.Result, error) {
	var r pipeline.Result
	err := json.Unmarshal(j.Result, &r)
	return r, err
}
