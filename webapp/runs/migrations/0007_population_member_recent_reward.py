from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_experiments_and_evaluation_answers")]

    operations = [
        migrations.AddField(
            model_name="populationmember",
            name="recent_reward",
            field=models.FloatField(
                blank=True,
                help_text="The mean of its per-step mean rewards over the steps its weight counts.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="populationmember",
            name="recent_low",
            field=models.FloatField(blank=True, help_text="The 95 % interval of recent_reward.", null=True),
        ),
        migrations.AddField(
            model_name="populationmember",
            name="recent_high",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="populationmember",
            name="recent_samples",
            field=models.IntegerField(blank=True, help_text="The groups behind recent_reward.", null=True),
        ),
    ]
