"""Produces rows through the libraries' own APIs: saves, updates and deletes of invoices make
auditlog log entries and simple_history versions. Usage: produce.py INVOICES UPDATES TAGGED"""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
import django  # noqa: E402

django.setup()
from shop.models import Invoice, Tag  # noqa: E402

invoices, updates, tagged = (int(a) for a in sys.argv[1:4])
tag, _ = Tag.objects.get_or_create(name="priority")
made = []
for i in range(invoices):
    inv = Invoice.objects.create(number=f"INV-{i}", customer=f"customer {i % 7}", amount=10 + i)
    made.append(inv)
for inv in made[:tagged]:
    inv.tags.add(tag)  # a version with a row in the m2m history (shop_historicalinvoice_tags)
    inv.save()
for round_ in range(updates):
    for inv in made:
        inv.amount += 1
        inv.state = "sent" if round_ % 2 == 0 else "paid"
        inv.save()  # a version; a tagged invoice's versions each record its tags
for inv in made[-2:]:
    inv.delete()  # auditlog 'delete' entries and simple_history '-' versions
print("produced", len(made))
