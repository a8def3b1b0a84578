import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

os.makedirs("output", exist_ok=True)
fig, ax = plt.subplots()
ax.plot([1, 2, 3, 4], [3, 1, 4, 1])
fig.savefig("output/plot.png")
plt.close(fig)  # a figure left open would also come back as output/figure-1.png
