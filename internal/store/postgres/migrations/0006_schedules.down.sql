DROP TABLE schedule_ticks;
DROP TABLE schedules;
