"""The claims of results/claims.md: document (claims.md and claims.json from the rows), rows (what a
claim is computed from and its typed verdict), numbers (the numbers a row carries), one module per
group of claims (loss: 1, 2; chasing: 3-5; fold: 6, 7; finetune: 8; stability; dyt), scaling (what
the committed scaling study adds to a row) and scale_card (the scale our numbers are measured at)."""
