from auditlog.registry import auditlog
from django.db import models
from simple_history.models import HistoricalRecords


class Tag(models.Model):
    name = models.CharField(max_length=40)


class Invoice(models.Model):
    number = models.CharField(max_length=20)
    customer = models.CharField(max_length=80)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    state = models.CharField(max_length=10, default="draft")
    tags = models.ManyToManyField(Tag, blank=True)
    # simple_history: one row per save in shop_historicalinvoice, and one per tag of that
    # version in shop_historicalinvoice_tags (its key to the version is NO ACTION in the database:
    # Django 5.2 cascades in Python).
    history = HistoricalRecords(m2m_fields=[tags])


# django-auditlog: one auditlog_logentry row per create, update and delete.
auditlog.register(Invoice)
