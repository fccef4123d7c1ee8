"""The figures, each saved as .pdf, .png and .html: training (figures 1-3 and fig6, make_figure),
gradients (4 and 4b), speedups (5), summary (the claims' gaps, the LR grid, the tails) and tails;
style (colours, captions, saving) and curves (curves vs step), which they share."""
