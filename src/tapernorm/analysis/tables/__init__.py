"""The tables, each written as <stem>.csv, <stem>.md and <stem>.tex: training (Tables 1, 2 and 5,
and the writers every table uses), inference (Table 3 and the decode table), finetune (Tables 4
and 6) and job_times (the pipeline's job records per rule)."""
